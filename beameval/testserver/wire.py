"""What the test servers send besides reply bodies (compact JSON, dropped connections), and what they record.

The OpenAI-compatible server (``app``, on aiohttp.web) answers with :func:`json_response`
and drops a connection with :func:`dropped`; the raw scripted server resets its streams
with :func:`abort_with_reset` too, so a "reset" is the same TCP RST from either.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

from aiohttp import web

__all__ = ["abort_with_reset", "body_of", "dropped", "json_response", "request_record"]


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> web.Response:
    """``payload`` as compact JSON (``{"a":1}``, as OpenAI writes it; aiohttp's own helper adds spaces)."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    return web.Response(status=status, body=body, headers=headers, content_type="application/json")


def abort_with_reset(transport: asyncio.WriteTransport | None) -> None:
    """Drop the connection with a TCP reset (``SO_LINGER`` 0) and no response."""
    if transport is None:  # already closed
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


def dropped(request: web.BaseRequest) -> web.Response:
    """Reset ``request``'s connection; return a response for the handler to return, which is never sent.

    aiohttp then fails to write it to the aborted transport, a ``ConnectionError`` it
    expects from a client that went away, and closes the connection quietly.
    """
    abort_with_reset(request.transport)
    return web.Response(status=500)


def request_record(request: web.BaseRequest, body: Any) -> dict[str, Any]:
    """The request as ``GET /_last_request`` shows it: header names lower-cased (a repeated one: its last value)."""
    headers = {name.lower(): value for name, value in request.headers.items()}
    return {"path": request.path, "method": request.method, "headers": headers, "body": body}


def body_of(response: web.Response) -> bytes:
    """The body of a response built by these servers: always bytes (aiohttp's type also allows a payload)."""
    body = response.body
    return bytes(body) if isinstance(body, (bytes, bytearray)) else b""
