"""Config field checks shared by targets and metrics that call endpoints (plain functions for pydantic)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import parse_qsl, urlparse

from beameval.core.redaction import redact_url, sensitive_query_name

__all__ = ["env_var_name", "header_fields", "http_url", "looks_like_key", "unique"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")  # whitespace and control characters: never part of a URL
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # an RFC 9110 token: no ':', space or TAB
_HEADER_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # CR, LF, NUL and other controls (TAB is allowed)
#: Headers the HTTP client owns: setting them by hand would break the framing or reroute the request.
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "upgrade", "te"})


def http_url(url: str) -> str:
    """Accept only an http(s) URL with a host, a valid port, no whitespace and no credentials in it.

    Raises:
        ValueError: any other scheme, no host, a port that is not 1-65535, a raw space,
            CR, LF or TAB (urllib would silently drop them), ``user:password@`` or a
            credential-like query parameter (``?api-key=``, ``?key=``, ``?code=``, ``?sig=``...).
    """
    bad = _CONTROL.search(url)
    if bad is not None:
        raise ValueError(
            f"must not contain whitespace or control characters (found {bad.group()!r} at position {bad.start()}); "
            "percent-encode it (%20) or remove it"
        )
    parsed = urlparse(url)
    if parsed.username is not None or parsed.password is not None:  # checked first: never echo a password
        raise ValueError(
            "must not carry credentials (user:password@host); put the key in the environment variable "
            "named by api_key_env"
        )
    secret_names = [name for name, _ in parse_qsl(parsed.query, keep_blank_values=True) if sensitive_query_name(name)]
    if secret_names:
        raise ValueError(
            f"must not carry a credential in its query string (parameter {secret_names[0]!r}); put the key in "
            "the environment variable named by api_key_env and its header name in api_key_header "
            "(e.g. api-key for Azure OpenAI)"
        )
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, got {redact_url(url)!r}")
    try:
        port = parsed.port
    except ValueError:
        raise ValueError(f"has an invalid port in {parsed.netloc!r}; a port is a number from 1 to 65535") from None
    if port == 0:
        raise ValueError(f"has port 0 in {parsed.netloc!r}; a port is a number from 1 to 65535")
    return url


def header_fields(headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """Accept only header names that are HTTP tokens and values without CR, LF or other control characters.

    A CR or LF would split the request (header injection); a ``:`` or TAB in a name is
    not a header at all; ``Host`` and the framing headers belong to the HTTP client.

    Raises:
        ValueError: naming the offending header.
    """
    for name, value in (headers or {}).items():
        if not _HEADER_NAME.match(name):
            raise ValueError(
                f"header name {name!r} is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~; "
                "no ':', spaces, TAB, CR or LF)"
            )
        if name.lower() in _RESERVED_HEADERS:
            raise ValueError(f"header {name!r} is set by the HTTP client and cannot be overridden")
        if not isinstance(value, str) or _HEADER_VALUE_BAD.search(value):
            raise ValueError(
                f"the value of header {name!r} contains CR, LF or another control character, which would "
                "split the request; remove it"
            )
    return headers


def env_var_name(name: str | None) -> str | None:
    """Accept the name of an environment variable, refusing what looks like a key itself (never echoing it).

    Raises:
        ValueError: not a valid variable name, or a value shaped like a key.
    """
    if name is not None and (not _ENV_NAME.match(name) or looks_like_key(name)):
        raise ValueError(
            "must be the NAME of an environment variable holding the key (letters, digits, _), never the key "
            "itself; the value given looks like a key, so it is not repeated here. Put the key in an environment "
            "variable (export OPENAI_API_KEY=...) and write that variable's name"
        )
    return name


def looks_like_key(value: str) -> bool:
    """Whether a value meant to be a variable's or secret's name looks like a credential pasted in its place.

    Names are words joined by ``_`` (``OPENAI_API_KEY``); keys are long runs of mixed
    case and digits (``hf_AbC...``, ``sk_live_...``) or long runs without separators.
    """
    has_digit = any(c.isdigit() for c in value)
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value)
    return (len(value) >= 20 and mixed and has_digit) or (len(value) >= 24 and "_" not in value and has_digit)


def unique(values: Sequence[str], what: str) -> None:
    """Refuse repeated names (score names, rubric labels).

    Raises:
        ValueError: naming ``what`` and the repeated values.
    """
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise ValueError(f"{what} must be unique; repeated: {repeated}")
