"""The one place secrets are masked: in messages, in outputs, in URLs, in anything written.

Every URL that reaches an output or a message passes through ``redact_url`` (user-info
dropped, credential-like query and fragment parameters masked). Every text or JSON-like
value written (rows, errors, the summary, results.json, the response journal and cache)
passes through a ``Redactor`` holding the run's configured secrets (the endpoints' API
keys): it masks them and any slice of them of 8 characters or more, and nothing else.
Redactors run where things are written, never on what metrics score, so a fresh, a
resumed and a cached answer score alike; text that merely looks like a key is data.

Messages about HTTP failures (``redact_text``, used by ``inference.classify`` on the
excerpts of error bodies it quotes) also mask bearer tokens and ``sk-``/``nvapi-`` style
keys nobody configured: an error body is not an answer, and may echo another service's key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = [
    "MASK",
    "MIN_SECRET_CHARS",
    "MIN_SLICE_CHARS",
    "Redactor",
    "redact_text",
    "redact_url",
    "redact_urls",
    "sensitive_query_name",
]

MASK = "***"
#: Shorter configured values are not masked: "1" or "yes" would mask every digit or word.
MIN_SECRET_CHARS = 4
#: A slice of a secret this long or longer is masked wherever it appears (a key cut in half still leaks).
MIN_SLICE_CHARS = 8
_AUTH_WORDS = (
    "auth",
    "token",
    "key",
    "secret",
    "credential",
    "bearer",
    "cookie",
    "signature",
    "password",
    "passwd",
    "hmac",
)
_AUTH_NAMES = frozenset({"sig", "code", "pwd", "pass", "session", "jwt", "sas"})
_URL = re.compile(r"(?i)^[a-z][a-z0-9+.-]*://")
_SECRET_PATTERNS = (
    (re.compile(r"(?i)(bearer\s+)[^\s\"',;]+"), r"\1" + MASK),
    (re.compile(r"\b(sk|nvapi|pk|rk)-[A-Za-z0-9_\-]{6,}"), r"\1-" + MASK),
)


def sensitive_query_name(name: str) -> bool:
    """Whether a URL query parameter named ``name`` carries a credential (``api-key``, ``code``, ``sig``...)."""
    normalised = name.lower().replace("_", "-")
    return normalised in _AUTH_NAMES or any(word in normalised for word in _AUTH_WORDS)


def redact_url(url: str) -> str:
    """The URL without user-info, and with credential-like parameters masked in its query and its fragment.

    ``?hmac=...`` and ``#key=...`` (OAuth's ``#access_token=...``) alike: a fragment made
    of ``name=value`` pairs is treated as a query.
    """
    if "@" not in url and "?" not in url and "#" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:  # an unparseable URL: mask the whole query, fragment and user-info rather than guess
        return re.sub(r"[?#].*$", "?" + MASK, re.sub(r"//[^/@]*@", "//", url))
    netloc = parts.netloc.rsplit("@", 1)[-1]
    fragment = _masked_pairs(parts.fragment) if "=" in parts.fragment else parts.fragment
    return urlunsplit((parts.scheme, netloc, parts.path, _masked_pairs(parts.query), fragment))


def _masked_pairs(query: str) -> str:
    """``name=value&...`` with the values of credential-like names masked (unchanged when none is)."""
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(sensitive_query_name(name) for name, _ in pairs):
        return query
    return urlencode([(k, MASK if sensitive_query_name(k) else v) for k, v in pairs], safe="*")


def redact_urls(value: Any) -> Any:
    """A JSON-like value (a config dump) with every string that is a URL passed through ``redact_url``."""
    if isinstance(value, str):
        return redact_url(value) if _URL.match(value) else value
    if isinstance(value, dict):
        return {key: redact_urls(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_urls(item) for item in value]
    return value


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Mask the given literal secrets, bearer tokens and well-known key shapes in ``text``.

    Returns ``text`` itself (the same object) when nothing needed masking, so callers can
    tell cheaply.
    """
    result = text
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_CHARS and secret in result:
            result = result.replace(secret, MASK)
    for pattern, replacement in _SECRET_PATTERNS:
        if pattern.search(result):
            result = pattern.sub(replacement, result)
    return result


class Redactor:
    """Masks a fixed set of secrets, and every slice of them of ``MIN_SLICE_CHARS`` or more, in what is written.

    Only the configured secrets (the endpoints' API keys) are masked: text that merely
    looks like a key (``sk-...``, ``Bearer ...``) and header values are data, and a
    redactor never sees what metrics score (it runs where rows, errors, the journal and
    the cache are written). Immutable and picklable.

    Args:
        secrets: the values to mask; empty ones and ones shorter than
            ``MIN_SECRET_CHARS`` are ignored.

    Example::

        redactor = Redactor(config.target.endpoint.secret_values())
        record = redactor.value(record)           # before writing it anywhere
    """

    __slots__ = ("_grams", "_short", "secrets")

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        unique = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
        # Longest first, so a secret containing another is masked whole.
        self.secrets: tuple[str, ...] = tuple(sorted(unique, key=len, reverse=True))
        forms = {form for secret in self.secrets for form in _forms(secret)}
        #: Every MIN_SLICE_CHARS-long window of every form of every secret: a slice of 8+ holds one.
        self._grams: frozenset[str] = frozenset(
            form[i : i + MIN_SLICE_CHARS] for form in forms for i in range(len(form) - MIN_SLICE_CHARS + 1)
        )
        #: Secrets too short to have slices: masked only whole.
        self._short: tuple[str, ...] = tuple(form for form in forms if len(form) < MIN_SLICE_CHARS)

    def __reduce__(self) -> tuple[type[Redactor], tuple[tuple[str, ...]]]:
        return (Redactor, (self.secrets,))

    def __add__(self, other: Redactor) -> Redactor:
        return Redactor((*self.secrets, *other.secrets))

    def text(self, text: str) -> str:
        """``text`` with every secret and every 8+ character slice of one masked (the same object back when clean)."""
        if not self.secrets:
            return text
        result = text
        for secret in self._short:
            if secret in result:
                result = result.replace(secret, MASK)
        spans = self._spans(result)
        if not spans:
            return result
        pieces, last = [], 0
        for begin, end in spans:
            pieces += [result[last:begin], MASK]
            last = end
        pieces.append(result[last:])
        return "".join(pieces)

    def bytes(self, data: bytes) -> bytes:
        """Mask the secrets in raw bytes (a reply body as stored): UTF-8 text, JSON escapes included."""
        if not self.secrets or not self._contains(data.decode("utf-8", "replace")):
            return data
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", "replace")  # never leak for want of a clean decode
        return self.text(text).encode("utf-8")

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string (keys included) redacted; unchanged values come back as they are.

        A clean value (the usual case) is found clean with one serialisation and one scan
        instead of a walk over every string.
        """
        if not self.secrets:  # nothing configured to leak
            return value
        if isinstance(value, (dict, list, tuple)) and self._clean(value):
            return value
        return self._walk(value)

    def _contains(self, text: str) -> bool:
        return any(secret in text for secret in self._short) or bool(self._spans(text, first_only=True))

    def _spans(self, text: str, first_only: bool = False) -> list[tuple[int, int]]:
        """The merged ``(begin, end)`` spans of ``text`` covered by windows of a secret."""
        if len(text) < MIN_SLICE_CHARS or not self._grams:
            return []
        found: list[tuple[int, int]] = []
        for gram in self._grams:
            at = text.find(gram)
            while at != -1:
                found.append((at, at + MIN_SLICE_CHARS))
                if first_only:
                    return found
                at = text.find(gram, at + 1)
        found.sort()
        merged: list[tuple[int, int]] = []
        for begin, end in found:
            if merged and begin <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((begin, end))
        return merged

    def _clean(self, value: Any) -> bool:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            return False
        return not self._contains(text)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            out = {self.text(k) if isinstance(k, str) else k: self._walk(v) for k, v in value.items()}
            same = all(a is b for a, b in zip(value.values(), out.values(), strict=True)) and list(out) == list(value)
            return value if same else out
        if isinstance(value, (list, tuple)):
            items = [self._walk(v) for v in value]
            return value if all(a is b for a, b in zip(value, items, strict=True)) else type(value)(items)
        return value


def _forms(secret: str) -> set[str]:
    """The secret as text, and as ``json.dumps`` writes it inside a string (escaped, ASCII or not)."""
    return {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
