"""The one place secrets are masked: in messages, in outputs, in URLs, in anything written.

Every URL that reaches an output or a message passes through ``redact_url``; every text
or JSON-like value written (rows, errors, the summary, results.json, the response
journal and cache) passes through a ``Redactor`` holding the run's configured secrets
(each API key and every ``default_headers`` value), which also masks bearer tokens and
``sk-``/``nvapi-`` style keys it was not told about.
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
    "Redactor",
    "redact_text",
    "redact_url",
    "redact_urls",
    "sensitive_query_name",
]

MASK = "***"
#: Shorter configured values are not masked: "1" or "yes" would mask every digit or word.
MIN_SECRET_CHARS = 4
_AUTH_WORDS = ("auth", "token", "key", "secret", "credential", "bearer", "cookie", "signature", "password", "passwd")
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
    """The URL without user-info, and with the values of credential-like query parameters masked."""
    if "@" not in url and "?" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:  # an unparseable URL: mask the whole query and user-info rather than guess
        return re.sub(r"\?.*$", "?" + MASK, re.sub(r"//[^/@]*@", "//", url))
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        masked = [(k, MASK if sensitive_query_name(k) else v) for k, v in pairs]
        query = urlencode(masked, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


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
    """Masks a fixed set of secrets in text, bytes and JSON-like values; immutable and picklable.

    Args:
        secrets: the values to mask (API keys, ``default_headers`` values); empty and
            very short ones are ignored.

    Example::

        redactor = Redactor(config.target.endpoint.secret_values())
        record = redactor.value(record)           # before writing it anywhere
    """

    __slots__ = ("secrets",)

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        unique = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
        # Longest first, so a secret containing another is masked whole.
        self.secrets: tuple[str, ...] = tuple(sorted(unique, key=len, reverse=True))

    def __reduce__(self) -> tuple[type[Redactor], tuple[tuple[str, ...]]]:
        return (Redactor, (self.secrets,))

    def __add__(self, other: Redactor) -> Redactor:
        return Redactor((*self.secrets, *other.secrets))

    def text(self, text: str) -> str:
        """``redact_text`` with this redactor's secrets (the same object back when clean).

        With no configured secret a text is data (a model's answer may well contain ``sk-``):
        it is kept as it is; messages get the generic patterns from ``redact_text`` itself.
        """
        return redact_text(text, self.secrets) if self.secrets else text

    def bytes(self, data: bytes) -> bytes:
        """Mask the secrets in raw bytes (a reply body as stored), as UTF-8 and as JSON escapes would hold them."""
        for secret in self.secrets:
            for form in {secret.encode("utf-8"), _json_escaped(secret)}:
                if form in data:
                    data = data.replace(form, MASK.encode())
        return data

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string (keys included) redacted; unchanged values come back as they are.

        A clean value (the usual case: every reply of a run passes here) is found clean with
        one serialisation and one scan instead of a walk that runs every pattern on every string;
        with no configured secret there is nothing to mask in data (message text still gets
        the bearer/key patterns through ``text``).
        """
        if not self.secrets:  # nothing configured to leak: replies are data, kept as received
            return value
        if isinstance(value, (dict, list, tuple)) and self._clean(value):
            return value
        return self._walk(value)

    def _clean(self, value: Any) -> bool:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            return False
        return redact_text(text, self.secrets) is text and not any(
            _json_escaped(s).decode() in text for s in self.secrets
        )

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


def _json_escaped(secret: str) -> bytes:
    """The secret as ``json.dumps`` would write it inside a string (ASCII-escaped), without quotes."""
    return json.dumps(secret)[1:-1].encode("ascii")
