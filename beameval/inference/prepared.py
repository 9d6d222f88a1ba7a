"""The wire form of one request and its stable hash, so caching and retries key on exactly what is sent."""

from __future__ import annotations

import datetime
import decimal
import enum
import functools
import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

import orjson

__all__ = ["PreparedRequest", "canonical_json", "request_hash", "request_hash_from_bytes", "wire_bytes"]


@dataclass(slots=True)
class PreparedRequest:
    """One HTTP POST, ready to send; never changed once built (a revised request is a new one).

    Not a frozen dataclass only because one is built for every request, and a frozen
    dataclass takes two and a half times as long to build.

    Attributes:
        url: the exact URL to POST to (query string included).
        body: the JSON body.
        headers: request headers; shared by all requests of a handler, so treat it as
            read-only. May hold the Authorization header: never log it.
        sample_index: which of a row's repeated samples this is (``params.repeats``); part
            of the response key, never sent.
        content: ``canonical_json(body)`` when the caller already made it (to key the
            request), so the engine does not serialise the body a second time.

    """

    url: str
    body: dict[str, Any]
    headers: Mapping[str, str]
    sample_index: int = 0
    content: bytes | None = field(default=None, compare=False, repr=False)


def _json_default(value: Any) -> Any:
    """Make values a dataset may carry (numpy scalars and arrays, dates, decimals, bytes, UUIDs, enums) JSON-ready."""
    if hasattr(value, "tolist"):  # numpy scalars and arrays, without importing numpy
        return value.tolist()
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, uuid.UUID):  # what orjson writes for one: both encoders must agree
        return str(value)
    if isinstance(value, enum.Enum):  # likewise (an int or str enum never gets here: both write it as its base)
        return value.value
    raise TypeError(f"a {type(value).__name__} value cannot be sent as JSON")


def canonical_json(value: Any) -> bytes:
    """Compact UTF-8 JSON with sorted keys: the bytes sent on the wire and hashed.

    The bytes are ``json.dumps(value, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False, allow_nan=False, default=_json_default)``: a response key is made of
    them, so they may never change, or every stored response would be lost. ``orjson``
    writes them in a tenth of the time (a cached rerun keys every row), and writes exactly
    those bytes except where ``_ORJSON_DIFFERS`` finds a trace of a difference; a body with
    any such trace (or one orjson refuses: an integer beyond 64 bits, a key that is not a
    string, a lone surrogate, deep nesting) is written by ``json`` itself.

    Raises:
        TypeError: the value holds something that has no JSON form.
        ValueError: the value holds NaN/Infinity or a circular reference.

    """
    try:
        encoded = orjson.dumps(value, default=_json_default, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        pass
    else:
        if not _orjson_may_differ(encoded):
            return encoded
    if c_make_encoder is None:  # no C accelerator: the same options through the pure-Python encoder
        return _ENCODER.encode(value).encode("utf-8")
    # What ``json.dumps`` runs with these options, minus building a JSONEncoder per call (once a row).
    chunks = c_make_encoder({}, _json_default, encode_basestring, None, ":", ",", True, False, False)(value, 0)
    return "".join(chunks).encode("utf-8")


#: Dates and dataclasses go to ``_json_default`` as they do with ``json`` (orjson has its own forms for them).
_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
#: orjson's one-digit negative exponent (json writes two digits: ``1e-07``).
_SHORT_EXPONENT = re.compile(rb"e-\d(?!\d)")


def _orjson_may_differ(encoded: bytes) -> bool:
    """True where orjson's bytes can differ from json's: then json writes them.

    A float below 1e-4 (orjson writes ``0.00001`` and ``1e-7`` where json writes ``1e-05``
    and ``1e-07``), and NaN or Infinity (orjson writes ``null``; json refuses them). Text
    that merely looks like one of these ("null", "type-2") only costs the slower encoder.
    Substring searches first: a regular expression over every body would cost most of what
    orjson saves.
    """
    if encoded.find(b"null") >= 0 or encoded.find(b"0.0000") >= 0:
        return True
    return encoded.find(b"e-") >= 0 and _SHORT_EXPONENT.search(encoded) is not None


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default
)


def wire_bytes(prepared: PreparedRequest) -> bytes:
    """The body as sent: ``prepared.content`` when set, else ``canonical_json(prepared.body)``.

    Raises:
        TypeError: the body holds something that has no JSON form.
        ValueError: the body holds NaN/Infinity or a circular reference.

    """
    return prepared.content if prepared.content is not None else canonical_json(prepared.body)


def request_hash_from_bytes(url: str, body_bytes: bytes) -> str:
    """``request_hash`` for a body already serialised with ``canonical_json`` (saves a second dump)."""
    digest = _hash_head(url).copy()
    digest.update(body_bytes)
    digest.update(b"]")
    return digest.hexdigest()


@functools.lru_cache(maxsize=256)  # a run POSTs to a handful of URLs, once per row
def _hash_head(url: str) -> Any:
    """SHA-256 after ``["url",``, made once per URL: copied (never updated) for each body."""
    return hashlib.sha256(b"[" + json.dumps(url, ensure_ascii=False).encode("utf-8") + b",")


def request_hash(prepared: PreparedRequest) -> str:
    """SHA-256 hex of the canonical JSON of ``[url, body]``.

    Stable across runs and processes; headers (and so API keys) are never part of it.
    Equal to ``hashlib.sha256(canonical_json([url, body])).hexdigest()``.
    """
    return request_hash_from_bytes(prepared.url, wire_bytes(prepared))
