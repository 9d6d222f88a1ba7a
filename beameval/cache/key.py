"""The response key: a hash of the canonical request as sent, so two runs that send the same request hit.

What goes in: the endpoint URL (normalised: scheme and host lower-cased, the default port
dropped, user-info and fragment dropped, path and query kept), the whole JSON body as it
goes on the wire (model name, messages or prompt after rendering, the system prompt,
every sampling parameter, ``stop``, ``seed``, ``tools``, ``tool_choice``,
``response_format``, extra body keys, NIM's ``max_tokens`` default: the handlers put all
of these in the body), the sample index (``params.repeats``), and every header sent
except credentials (``keyed_headers``): a ``default_headers`` entry that routes the
request (a blue/green deployment selector) selects its own answer. What never goes in:
``Authorization``, ``api-key``, ``x-api-key`` and any header whose value holds a
configured key, so the key itself never changes (or enters) a key.

The byte layout, defined once in ``response_digest``: SHA-256 of
``canonical_json(["beameval-response", KEY_VERSION, normalize_url(url), body,
sample_index, [[header name lower-cased, value], ...]])``, headers sorted by name.
``KEY_VERSION`` is hashed too and stored in every entry: a change to what the key covers
bumps it, so old entries miss instead of answering a request they were never the answer
to (version 2 added the headers; a version-1 store simply misses).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from beameval.config.access import is_credential_header
from beameval.inference.prepared import PreparedRequest, canonical_json, wire_bytes

__all__ = [
    "KEY_VERSION",
    "keyed_headers",
    "normalize_url",
    "prepared_key",
    "response_key",
    "response_digest",
    "response_key_from_content",
]

#: The version of the key's definition; bump it whenever ``response_key`` changes what it covers.
KEY_VERSION = 2

_DEFAULT_PORTS = {"http": 80, "https": 443}
_KEY_HEAD = f'["beameval-response",{KEY_VERSION},'.encode()


def keyed_headers(headers: Mapping[str, str] | None, secrets: Iterable[str] = ()) -> list[list[str]]:
    """The headers that are part of a request's key: every one sent but credentials, ``[name, value]`` by name.

    Args:
        headers: the headers sent (``PreparedRequest.headers``).
        secrets: the endpoint's keys (``TargetHandler.secrets``): a header holding one
            (``api_key_header: X-Custom``) is a credential whatever its name.

    Returns:
        ``[[lower-cased name, value], ...]`` sorted by name.
    """
    secrets = tuple(secrets)
    return sorted(
        [name.lower(), value]
        for name, value in (headers or {}).items()
        if not is_credential_header(name, value, secrets)
    )


@functools.lru_cache(maxsize=256)  # a run POSTs to a handful of URLs, once per row
def normalize_url(url: str) -> str:
    """Return ``url`` with scheme and host lower-cased and the default port, user-info and fragment dropped.

    The path and query are kept as they are: servers may treat them case-sensitively.

    Args:
        url: an endpoint URL such as ``HTTP://Host:80/v1/chat/completions``.

    Returns:
        The normalised URL, e.g. ``http://host/v1/chat/completions``.

    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a number: keep the authority as written (it fails when sent anyway)
        port = None
        host = parts.netloc.rpartition("@")[2].lower()
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path, parts.query, ""))


def response_key(
    url: str,
    body: Any,
    sample_index: int = 0,
    headers: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
) -> str:
    """Return the SHA-256 hex key of one request.

    Args:
        url: the URL the request is POSTed to.
        body: the JSON body as sent.
        sample_index: which of a row's repeated samples this is (0 without repeats).
        headers: the headers sent; credentials are left out (``keyed_headers``).
        secrets: the endpoint's keys, for ``keyed_headers``.

    Returns:
        64 hex digits (the layout is in the module's docstring).

    Raises:
        TypeError: the body holds a value with no JSON form.
        ValueError: the body holds NaN or Infinity.

    """
    return response_key_from_content(url, canonical_json(body), sample_index, headers, secrets)


def response_key_from_content(
    url: str,
    content: bytes,
    sample_index: int = 0,
    headers: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
) -> str:
    """``response_key`` for a body already serialised with ``canonical_json`` (the bytes sent): one dump per request."""
    return response_digest(url, content, sample_index, headers, secrets).hex()


def response_digest(
    url: str,
    content: bytes,
    sample_index: int = 0,
    headers: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
) -> bytes:
    """The 32 bytes whose hex is ``response_key_from_content`` (the join's raw key, without hex and back).

    The one definition of the key's bytes: exactly ``canonical_json`` of the key's list,
    built around the body's bytes. Everything but the body is the same for every row of a
    run, so the hash of what comes before the body (``_key_head``) is made once and copied,
    and what comes after it (``_tail_of``) is made once.
    """
    digest = _key_head(url).copy()
    digest.update(content)
    digest.update(_tail_of(int(sample_index), headers, tuple(secrets)))
    return digest.digest()


#: ``_tail_of``'s memo: (index, the headers mapping's id, secrets) -> (that mapping, its tail).
_TAILS: dict[tuple[int, int, tuple[str, ...]], tuple[Mapping[str, str] | None, bytes]] = {}
_TAILS_HELD = 256


def _tail_of(index: int, headers: Mapping[str, str] | None, secrets: tuple[str, ...]) -> bytes:
    """``_tail_bytes``, looked up by the headers mapping itself rather than by its items.

    A handler sends every request with the one headers mapping it built, read-only
    (``PreparedRequest.headers``), so its identity names its items: no tuple of them to
    build and hash once a row. The memo holds each mapping it names, so no other object
    can take its id while it is there.
    """
    memo = (index, id(headers), secrets)
    held = _TAILS.get(memo)
    if held is not None and held[0] is headers:
        return held[1]
    tail = _tail_bytes(index, headers, secrets)  # refused there if a header is not JSON
    if len(_TAILS) >= _TAILS_HELD:
        _TAILS.clear()
    _TAILS[memo] = (headers, tail)
    return tail


# A run sends every row's request to the same URL with the same headers: their bytes in the
# key are made once, not once a row (three JSON dumps of the four a request's keys need).
@functools.lru_cache(maxsize=256)
def _key_head(url: str) -> Any:
    """SHA-256 after ``["beameval-response",VERSION,"url",``: copied (never updated) for each body."""
    url_json = json.dumps(normalize_url(url), ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(_KEY_HEAD + url_json + b",")


def _tail_bytes(sample_index: int, headers: Mapping[str, str] | None, secrets: tuple[str, ...]) -> bytes:
    """``,INDEX,[[name,value],...]]``: what follows the body in the key's list."""
    return f",{sample_index},".encode() + canonical_json(keyed_headers(headers, secrets)) + b"]"


def prepared_key(prepared: PreparedRequest, sample_index: int | None = None, secrets: Iterable[str] = ()) -> str:
    """Return ``response_key`` of a prepared request, its headers but credentials included.

    Args:
        prepared: the request as built by a handler.
        sample_index: overrides ``prepared.sample_index`` when given.
        secrets: the endpoint's keys (``TargetHandler.secrets``), so a header carrying
            one is left out whatever its name.

    Returns:
        The request's key.

    Raises:
        TypeError: the body holds a value with no JSON form.
        ValueError: the body holds NaN or Infinity.

    """
    index = prepared.sample_index if sample_index is None else sample_index
    return response_key_from_content(prepared.url, wire_bytes(prepared), index, prepared.headers, secrets)
