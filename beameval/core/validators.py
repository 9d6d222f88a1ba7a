"""Config field checks shared by targets and metrics that call endpoints (plain functions for pydantic)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlparse

__all__ = ["env_var_name", "http_url", "unique"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def http_url(url: str) -> str:
    """Accept only an http(s) URL with a host and no credentials in it.

    Raises:
        ValueError: any other scheme, no host, or ``user:password@`` in the URL.
    """
    parsed = urlparse(url)
    if parsed.username is not None or parsed.password is not None:  # checked first: never echo a password
        raise ValueError(
            "must not carry credentials (user:password@host); put the key in the environment variable "
            "named by api_key_env"
        )
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"must be an http:// or https:// URL with a host, got {url!r}")
    return url


def env_var_name(name: str | None) -> str | None:
    """Accept the name of an environment variable, refusing what looks like a key itself.

    Raises:
        ValueError: not a valid variable name.
    """
    if name is not None and not _ENV_NAME.match(name):
        raise ValueError(
            "must be the NAME of an environment variable holding the key (letters, digits, _), never the key itself"
        )
    return name


def unique(values: Sequence[str], what: str) -> None:
    """Refuse repeated names (score names, rubric labels).

    Raises:
        ValueError: naming ``what`` and the repeated values.
    """
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise ValueError(f"{what} must be unique; repeated: {repeated}")
