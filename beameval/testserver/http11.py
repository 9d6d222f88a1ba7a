"""Minimal HTTP/1.1 framing over asyncio streams, so the server stays fast and dependency-free."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

__all__ = ["BadRequest", "Request", "Response", "json_response", "read_request"]

MAX_BODY = 64 * 1024 * 1024
_REASONS = {status.value: status.phrase for status in HTTPStatus}


class BadRequest(Exception):
    """The bytes on the connection are not a request we can frame; answer and close.

    Args:
        status: the HTTP status to answer with.
        message: what was wrong.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class Request:
    """One parsed request.

    Attributes:
        method: upper-case method.
        path: target without the query string.
        headers: header names lower-cased; a repeated header keeps its last value.
        body: the raw body (Content-Length bytes).
        keep_alive: whether the connection stays open after the answer.
        query: the query string, without its ``?`` ("" when there is none).
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    query: str = ""


@dataclass(slots=True)
class Response:
    """One answer, encoded by :meth:`encode`.

    Attributes:
        status: HTTP status.
        body: the body bytes.
        headers: extra headers (e.g. ``Retry-After``).
        content_type: the ``Content-Type`` value.
    """

    status: int
    body: bytes
    headers: dict[str, str] | None = None
    content_type: str = "application/json"

    def encode(self, keep_alive: bool) -> bytes:
        """Serialize status line, headers and body for the wire."""
        head = (
            f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Unknown')}\r\n"
            f"Content-Type: {self.content_type}\r\n"
            f"Content-Length: {len(self.body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n"
        )
        if self.headers:
            head += "".join(f"{name}: {value}\r\n" for name, value in self.headers.items())
        return (head + "\r\n").encode("latin-1") + self.body


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    """Encode ``payload`` as a compact JSON response."""
    return Response(status, json.dumps(payload, separators=(",", ":")).encode(), headers)


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """Read one request from ``reader``.

    Returns:
        The request, or None when the peer closed the connection between requests.

    Raises:
        BadRequest: the request line, headers or framing are invalid or unsupported.
        asyncio.IncompleteReadError: the peer closed in the middle of a body.
    """
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadRequest(400, "incomplete request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise BadRequest(431, "request head too large") from None
    lines = head[:-4].decode("latin-1").lstrip("\r\n").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, f"bad request line {lines[0][:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(400, f"bad header line {line[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise BadRequest(501, "chunked request bodies are not supported")
    try:
        length = int(headers.get("content-length") or 0)
    except ValueError:
        raise BadRequest(400, "bad Content-Length") from None
    if not 0 <= length <= MAX_BODY:
        raise BadRequest(413, "body too large")
    body = await reader.readexactly(length) if length else b""
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    path, _, query = target.partition("?")
    return Request(method.upper(), path, headers, body, keep_alive, query)
