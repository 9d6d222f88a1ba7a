"""How an endpoint is reached and authenticated: the key's variable, the header that carries it, the CA bundle.

Shared by every config that names an endpoint (model and agent targets, judge models,
remote metrics), so the rules for keys and TLS are written once.
"""

from __future__ import annotations

import os
import re
from typing import Annotated

from pydantic import Field, field_validator

from beameval.config.frozen import Frozen
from beameval.config.quota import Pricing, RateLimit
from beameval.core.validators import env_var_name
from beameval.secrets.source import read_secret, secret_name

__all__ = ["DEFAULT_KEY_HEADER", "DEFAULT_MAX_RESPONSE_BYTES", "EndpointAccess", "key_headers"]

DEFAULT_KEY_HEADER = "Authorization"
DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # an HTTP header name (RFC 9110 token)


def key_headers(api_key: str | None, header: str = DEFAULT_KEY_HEADER) -> dict[str, str]:
    """The header carrying ``api_key``: ``Authorization: Bearer <key>``, or ``<header>: <key>``; none without a key."""
    if not api_key:
        return {}
    if header.lower() == DEFAULT_KEY_HEADER.lower():
        return {DEFAULT_KEY_HEADER: f"Bearer {api_key}"}
    return {header: api_key}


class EndpointAccess(Frozen):
    """The fields every endpoint config has for reaching it.

    Attributes:
        api_key_env: the NAME of the environment variable holding the key (never the key).
        api_key_secret: a Google Secret Manager version holding the key
            (``projects/P/secrets/S/versions/V``), read once per worker process; used
            when ``api_key_env`` is unset or names an unset variable (``gcp`` extra).
        api_key_header: ``Authorization`` (sent as ``Bearer <key>``) or any other header
            name, sent with the bare key (``api-key`` for Azure OpenAI, ``x-api-key``).
        ca_bundle: a PEM file of CA certificates to trust instead of the system's store.
        max_response_bytes: the largest reply body accepted (after decompression); a
            larger one fails its attempt, not retried.
        rate_limit: requests and tokens per minute for the whole job (``RateLimit``).
        pricing: dollars per million prompt and completion tokens (``Pricing``).

    """

    api_key_env: str | None = None
    api_key_secret: str | None = None
    api_key_header: str = DEFAULT_KEY_HEADER
    ca_bundle: str | None = None
    max_response_bytes: Annotated[int, Field(ge=1024)] = DEFAULT_MAX_RESPONSE_BYTES
    rate_limit: RateLimit | None = None
    pricing: Pricing | None = None

    _key = field_validator("api_key_env")(env_var_name)
    _secret = field_validator("api_key_secret")(secret_name)

    @field_validator("api_key_header")
    @classmethod
    def _header_name(cls, name: str) -> str:
        if not _TOKEN.match(name):
            raise ValueError(f"must be an HTTP header name (letters, digits and !#$%&'*+-.^_`|~), got {name!r}")
        if name.lower() in ("host", "content-length", "content-type", "transfer-encoding", "connection"):
            raise ValueError(f"{name!r} cannot carry the key; use Authorization or a header of its own")
        return name

    def api_key(self) -> str | None:
        """The key: from the variable named in ``api_key_env`` if it is set, else from ``api_key_secret``, if any.

        Raises:
            ConfigError: ``api_key_secret`` is needed and cannot be read.
        """
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if not key and self.api_key_secret:
            return read_secret(self.api_key_secret)  # once per process; the value stays in memory
        return key

    def secret_values(self) -> tuple[str, ...]:
        """Every configured value that must never be written (the key; model targets add header values)."""
        key = self.api_key()
        return (key,) if key else ()

    def key_headers(self, api_key: str | None) -> dict[str, str]:
        """The header carrying ``api_key`` for this endpoint (see ``key_headers``)."""
        return key_headers(api_key, self.api_key_header)
