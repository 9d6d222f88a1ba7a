"""The response key: a hash of the canonical request as sent, so two runs that send the same request hit.

What goes in: the endpoint URL (normalised: scheme and host lower-cased, the default port
dropped, user-info and fragment dropped, path and query kept), the whole JSON body as it
goes on the wire (model name, messages or prompt after rendering, the system prompt,
every sampling parameter, ``stop``, ``seed``, ``tools``, ``tool_choice``,
``response_format``, extra body keys, NIM's ``max_tokens`` default: the handlers put all
of these in the body), and the sample index (``params.repeats``). What never goes in:
headers, and so the API key. ``KEY_VERSION`` is hashed too and stored in every entry: a
change to what the key covers bumps it, so old entries miss instead of answering a
request they were never the answer to.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from beameval.inference.prepared import PreparedRequest, canonical_json, wire_bytes

__all__ = ["KEY_VERSION", "normalize_url", "prepared_key", "response_key", "response_key_from_content"]

#: The version of the key's definition; bump it whenever ``response_key`` changes what it covers.
KEY_VERSION = 1

_DEFAULT_PORTS = {"http": 80, "https": 443}
_KEY_HEAD = f'["beameval-response",{KEY_VERSION},'.encode()


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


def response_key(url: str, body: Any, sample_index: int = 0) -> str:
    """Return the SHA-256 hex key of one request.

    Args:
        url: the URL the request is POSTed to.
        body: the JSON body as sent.
        sample_index: which of a row's repeated samples this request is (0 without repeats).

    Returns:
        64 hex digits: ``sha256(canonical_json(["beameval-response", KEY_VERSION,
        normalize_url(url), body, sample_index]))``.

    Raises:
        TypeError: the body holds a value with no JSON form.
        ValueError: the body holds NaN or Infinity.

    """
    return response_key_from_content(url, canonical_json(body), sample_index)


def response_key_from_content(url: str, content: bytes, sample_index: int = 0) -> str:
    """``response_key`` for a body already serialised with ``canonical_json`` (the bytes sent): one dump per request.

    The hashed bytes are exactly ``canonical_json`` of the key's list, built around the body's bytes.
    """
    digest = hashlib.sha256(_KEY_HEAD)
    digest.update(json.dumps(normalize_url(url), ensure_ascii=False).encode("utf-8"))
    digest.update(b",")
    digest.update(content)
    digest.update(f",{int(sample_index)}]".encode())
    return digest.hexdigest()


def prepared_key(prepared: PreparedRequest, sample_index: int | None = None) -> str:
    """Return ``response_key`` of a prepared request (its headers are ignored).

    Args:
        prepared: the request as built by a handler.
        sample_index: overrides ``prepared.sample_index`` when given.

    Returns:
        The request's key.

    Raises:
        TypeError: the body holds a value with no JSON form.
        ValueError: the body holds NaN or Infinity.

    """
    index = prepared.sample_index if sample_index is None else sample_index
    return response_key_from_content(prepared.url, wire_bytes(prepared), index)
