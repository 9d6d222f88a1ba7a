"""The one place where HTTP statuses and aiohttp/asyncio/OS exceptions become retry decisions and one-line messages."""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from urllib.parse import urlsplit

import aiohttp

from beameval.core.redaction import redact_text, redact_url
from beameval.inference.errors import FailureClass, MalformedResponseError, ResponseError

__all__ = [
    "Failure",
    "FailureClass",
    "classify",
    "endpoint_name",
    "one_line",
    "parse_retry_after",
    "redact",
    "safe_url",
]

_HARD_OVERLOAD = frozenset({429, 503})
_TRANSIENT = frozenset({408, 500, 502, 504})
_EXCERPT = 200
_REDACT_MARGIN = 8192


@dataclass(frozen=True, slots=True)
class Failure:
    """How one failed attempt is treated.

    Attributes:
        failure_class: ``hard_overload`` (429, 503), ``soft_overload`` (timeouts),
            ``transient`` (408, 500, 502, 504, connection errors, malformed 2xx bodies)
            or ``fatal`` (anything else).
        retryable: whether another attempt may succeed.
        retry_after: the server's ``Retry-After`` in seconds, when it sent one.
        status: the HTTP status, when there was a response.
        message: one line for the user; never holds keys or Authorization headers.
        tls: the TLS handshake failed (a certificate that does not verify, most often):
            a certificate problem, not an unreachable host, and messages say so.

    """

    failure_class: FailureClass
    retryable: bool
    retry_after: float | None
    status: int | None
    message: str
    tls: bool = False


def parse_retry_after(header_value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value.

    Args:
        header_value: delay-seconds (``"1"``, ``"0.5"``) or an HTTP date.
        now: the current time as a Unix timestamp (``time.time()`` when None); used for dates.

    Returns:
        The delay in seconds, negative delays clamped to 0; None when the value is
        missing or unreadable.

    """
    if header_value is None:
        return None
    text = header_value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when is None:  # pragma: no cover - older Pythons returned None for garbage
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def classify(
    cause: BaseException | int,
    *,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    body: bytes | str | None = None,
    now: float | None = None,
    secrets: Iterable[str] = (),
) -> Failure:
    """Classify a failed attempt.

    Args:
        cause: the HTTP status of a non-2xx reply, or the exception the attempt raised.
        url: the request URL, for the message (auth-like query values are masked).
        headers: the reply headers, for ``Retry-After``.
        body: the reply body, quoted (first 200 characters) for non-retryable statuses.
        now: Unix time, for ``Retry-After`` dates.
        secrets: literal strings (API keys) to mask if they appear in the message.

    Returns:
        The failure's class, retryability and a one-line message.

    """
    where = f" from {safe_url(url)}" if url else ""
    if isinstance(cause, BaseException):
        failure = _classify_exception(cause, url, where)
    else:
        failure = _classify_status(int(cause), where, headers, body, now, secrets)
    message = redact(one_line(failure.message), secrets)
    if message is failure.message:
        return failure
    return dataclasses.replace(failure, message=message)


def _classify_status(
    status: int,
    where: str,
    headers: Mapping[str, str] | None,
    body: bytes | str | None,
    now: float | None,
    secrets: Iterable[str] = (),
) -> Failure:
    retry_after = parse_retry_after(headers.get("retry-after"), now) if headers is not None else None
    try:
        phrase = f" {HTTPStatus(status).phrase}"
    except ValueError:
        phrase = ""
    suffix = f" (retry-after {retry_after:g}s)" if retry_after is not None else ""
    if status in _HARD_OVERLOAD:
        return Failure("hard_overload", True, retry_after, status, f"HTTP {status}{phrase}{where}{suffix}")
    if status in _TRANSIENT:
        return Failure("transient", True, retry_after, status, f"HTTP {status}{phrase}{where}{suffix}")
    excerpt = _excerpt(body, secrets)
    detail = f": {excerpt}" if excerpt else ""
    location = headers.get("location") if headers is not None and 300 <= status < 400 else None
    if location:  # where the endpoint moved: the fix is usually to use that URL
        detail = f" (Location: {safe_url(one_line(location))[:_EXCERPT]}; point the URL at it){detail}"
    return Failure("fatal", False, None, status, f"HTTP {status}{phrase}{where}{detail}")


def _classify_exception(exc: BaseException, url: str | None, where: str) -> Failure:
    host = _host(url)
    if isinstance(exc, MalformedResponseError):
        return Failure("transient", True, None, None, f"malformed reply{where}: {exc.message}")
    if isinstance(exc, ResponseError):
        return Failure(exc.failure_class, exc.retryable, None, None, exc.message)
    if isinstance(exc, json.JSONDecodeError):
        return Failure("transient", True, None, None, f"malformed reply{where}: the body is not valid JSON ({exc.msg})")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):  # will not verify on retry either
        reason = f"the server's certificate did not verify ({_tls_reason(exc)})"
        return Failure("fatal", False, None, None, f"TLS with {host} failed: {reason}", tls=True)
    if isinstance(exc, aiohttp.ClientSSLError):
        return Failure("fatal", False, None, None, f"TLS with {host} failed: {_tls_reason(exc)}", tls=True)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return Failure("transient", True, None, None, f"timed out connecting to {host}")
    if isinstance(exc, TimeoutError):  # asyncio's, and aiohttp's total and socket timeouts
        return Failure("soft_overload", True, None, None, f"timed out waiting for a reply{where}")
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return Failure("transient", True, None, None, f"could not connect to the proxy for {host}: {_describe(exc)}")
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        retryable = exc.status not in (403, 407)
        return Failure(
            "transient" if retryable else "fatal",
            retryable,
            None,
            None,
            f"the proxy refused the tunnel to {host} (HTTP {exc.status})",
        )
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return Failure("transient", True, None, None, f"cannot resolve the host of {host} ({_describe(exc)})")
    if isinstance(exc, (aiohttp.ClientConnectorError, ConnectionRefusedError)):
        if _is_refused(exc):
            return Failure("transient", True, None, None, f"connection refused by {host} (is the server running?)")
        return Failure("transient", True, None, None, f"could not connect to {host}: {_describe(exc)}")
    if isinstance(exc, aiohttp.ClientPayloadError) and _is_decoding(exc):
        return Failure("fatal", False, None, None, f"the reply{where} cannot be decoded: {_describe(exc)}")
    if isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError)):
        return Failure(
            "transient",
            True,
            None,
            None,
            f"connection to {host} was reset or closed before a complete reply ({_describe(exc)})",
        )
    if isinstance(exc, aiohttp.ClientResponseError):  # the reply's framing or headers are broken
        return Failure("transient", True, None, None, f"malformed reply{where}: {exc.message}")
    if isinstance(exc, (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError)):
        return Failure("fatal", False, None, None, f"invalid endpoint URL {safe_url(url or '')!r}")
    return Failure("fatal", False, None, None, f"request{where} failed: {_describe(exc)}")


def _is_refused(exc: BaseException) -> bool:
    return any(
        isinstance(cause, ConnectionRefusedError)
        or getattr(cause, "errno", None) == errno.ECONNREFUSED
        or "refused" in str(cause).lower()
        for cause in _causes(exc)
    )


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _is_decoding(exc: BaseException) -> bool:
    """Whether a payload error came from decompressing the body (retrying cannot fix a bad encoding)."""
    return any("encoding" in type(cause).__name__.lower() or isinstance(cause, zlib.error) for cause in _causes(exc))


def _tls_reason(exc: BaseException) -> str:
    """The verifier's own words (``self-signed certificate``, ``hostname mismatch``), else the error."""
    inner = getattr(exc, "certificate_error", None) or getattr(exc, "os_error", None)
    for cause in [*_causes(exc), *([inner] if isinstance(inner, BaseException) else [])]:
        reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None)
        if isinstance(reason, str) and reason:
            return reason.lower().replace("_", " ")
    return _describe(exc)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _host(url: str | None) -> str:
    if not url:
        return "the endpoint"
    parts = urlsplit(url)
    return parts.netloc.rsplit("@", 1)[-1] or url


def _excerpt(body: bytes | str | None, secrets: Iterable[str] = ()) -> str:
    """The first 200 characters of the body, redacted first: a key straddling the cut must not leak in part."""
    if body is None:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body)
    # Redact a generous prefix, then cut: any secret crossing the cut is inside the prefix whole.
    text = redact_text(one_line(text[: _EXCERPT + _REDACT_MARGIN]), secrets)
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"


def one_line(text: str) -> str:
    """Collapse all whitespace (newlines included) into single spaces."""
    if "\n" not in text and "\r" not in text and "\t" not in text and "  " not in text:
        return text
    return " ".join(text.split())


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Mask API keys, bearer tokens and the given literal secrets in a message (``redaction.redact_text``).

    Returns ``text`` itself (same object) when nothing needed masking.
    """
    return redact_text(text, secrets)


def safe_url(url: str) -> str:
    """Return the URL without user-info, and with auth-like query values masked (``redaction.redact_url``)."""
    return redact_url(url)


def endpoint_name(endpoint_key: str) -> str:
    """``URL (model NAME)`` from an engine's endpoint key (``url|name|key fingerprint``), for messages."""
    url, _, rest = endpoint_key.partition("|")
    name = rest.partition("|")[0]
    return f"{safe_url(url)} (model {name})" if name else safe_url(url)
