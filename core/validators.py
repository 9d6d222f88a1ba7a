"""Config field checks shared by targets and metrics that call endpoints (plain functions for pydantic)."""

from __future__ import annotations

import re
from urllib.parse import urlparse

__all__ = ["env_var_name", "http_url"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def http_url(url: str) -> str:
    """Accept only an http(s) URL with a host.

    Raises:
        ValueError: any other scheme, or no host.
    """
    parsed = urlparse(url)
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
