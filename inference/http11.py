"""A lean HTTP/1.1 keep-alive client on asyncio protocols: the engine's transport when no proxy is set.

Why not httpx here: httpx, httpcore and anyio cost about 0.5 ms of CPU and several event
loop passes per request. With 64 requests in flight those passes queue behind each other,
so at a fixed 100 ms server latency a bare httpx loop reached 0.91 of the ideal rate where
plain asyncio sockets reached 0.97 (docs/BENCHMARKS.md). Here a request is one
``transport.write`` and one awaited future, and the reply is parsed in ``data_received``.

Scope, on purpose: POST with an in-memory body over TCP or TLS; replies delimited by
``Content-Length``, chunked encoding or connection close; ``1xx`` replies skipped; gzip
and deflate bodies decoded (none is asked for, some servers send them anyway); no
redirects, HTTP/2 or proxies (``pool.make_client`` uses httpx when the environment names
a proxy). Failures raise httpx's exception classes so ``inference.classify`` stays the
one place that turns them into retry decisions.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import zlib
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import quote, urlsplit

import httpx

__all__ = ["Http11Client", "HttpResponse"]

_MAX_HEAD = 64 * 1024
# Characters kept as they are in a request target; anything else is percent-encoded (RFC 3986).
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"
_MAX_CHUNK_LINE = 4096
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_UNTIL_CLOSE = -1
_CHUNKED = -2


class HttpResponse:
    """A fully read reply: what the retry loop reads from ``httpx.Response``, without its cost."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers  # names lower-cased; repeated headers joined with ", "
        self.content = content


class _Origin(NamedTuple):
    host: str
    port: int
    tls: bool
    request_line: bytes
    host_line: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[HttpResponse] | None = None
        self._status = 0
        self._headers: dict[str, str] | None = None
        self._remaining = 0  # body bytes still to read, or _UNTIL_CLOSE / _CHUNKED
        self._chunks: list[bytes] = []
        self._scanned = 0  # bytes of the buffer already searched for the end of the head
        self.reusable = True
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():  # bytes nobody asked for: unusable
            self.abort()
            return
        self._buffer += data
        try:
            self._parse()
        except httpx.RemoteProtocolError as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        self.reusable = False
        if self._remaining == _UNTIL_CLOSE and self._headers is not None:
            self._finish(bytes(self._buffer))
        return False  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self._remaining == _UNTIL_CLOSE and self._headers is not None and exc is None:
            self._finish(bytes(self._buffer))
            return
        if exc is not None:
            self._fail(httpx.ReadError(f"{type(exc).__name__}: {exc}"))
        else:
            self._fail(httpx.RemoteProtocolError("the server closed the connection before a complete reply"))

    async def request(self, message: bytes, timeout: float) -> HttpResponse:
        """Send one request and wait for its reply; on any failure the connection is dropped."""
        assert self._transport is not None
        waiter = self._waiter = self._loop.create_future()
        self._status, self._headers, self._remaining, self._chunks, self._scanned = 0, None, 0, [], 0
        self._transport.write(message)
        timer = self._loop.call_later(timeout, self._time_out, timeout)
        try:
            return await waiter
        except BaseException:
            self.abort()
            raise
        finally:
            timer.cancel()
            self._waiter = None

    def usable(self) -> bool:
        """True when an idle connection is still open: no close (or stray bytes) waiting unread.

        The loop may not have read a FIN that has already arrived (a server that closes right
        after a reply), so the socket itself is asked, as httpcore does before reuse.
        """
        if self.closed or not self.reusable or self._transport is None:
            return False
        sock = self._transport.get_extra_info("socket")
        if sock is None:
            return True
        try:
            return not _readable(sock.fileno())
        except (OSError, ValueError):
            return False

    def abort(self) -> None:
        """Drop the connection now."""
        self.reusable = False
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    def _time_out(self, timeout: float) -> None:
        self._fail(httpx.ReadTimeout(f"no complete reply within {timeout:g} s"))
        self.abort()

    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _finish(self, body: bytes) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            assert self._headers is not None
            encoding = self._headers.get("content-encoding")
            if encoding is not None and body:
                try:
                    body = _decoded(body, encoding)
                except httpx.DecodingError as exc:
                    waiter.set_exception(exc)
                    return
            waiter.set_result(HttpResponse(self._status, self._headers, body))

    def _parse(self) -> None:
        buffer = self._buffer
        while self._headers is None:
            end = buffer.find(b"\r\n\r\n", max(0, self._scanned - 3))  # resume: a slow peer costs O(n), not O(n^2)
            if end < 0:
                if len(buffer) > _MAX_HEAD:
                    raise httpx.RemoteProtocolError("the reply's header section is over 64 KiB")
                self._scanned = len(buffer)
                return
            head = bytes(buffer[:end])
            del buffer[: end + 4]
            self._scanned = 0
            self._read_head(head)
        remaining = self._remaining
        if remaining == _CHUNKED:
            self._read_chunks()
        elif remaining >= 0 and len(buffer) >= remaining:
            body = bytes(buffer[:remaining])
            del buffer[:remaining]
            if buffer:  # more than the reply: the connection is out of step
                self.reusable = False
            self._finish(body)

    def _read_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            version, status = parts[0], int(parts[1])
        except (IndexError, ValueError):
            raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}") from None
        if not version.startswith("HTTP/1."):
            raise httpx.RemoteProtocolError(f"unsupported protocol {version[:20]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        if 100 <= status < 200:  # 100 Continue, 103 Early Hints: the real reply follows
            return
        self._status, self._headers = status, headers
        connection = headers.get("connection", "").lower()
        if "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection):
            self.reusable = False
        if status in (204, 304):
            self._remaining = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._remaining = _CHUNKED
        elif "content-length" in headers:
            values = {value.strip() for value in headers["content-length"].split(",")}
            if len(values) != 1 or not all(value.isascii() and value.isdigit() for value in values):
                shown = headers["content-length"][:40]
                raise httpx.RemoteProtocolError(f"malformed or conflicting Content-Length {shown!r}")
            self._remaining = int(values.pop())
        else:
            self._remaining = _UNTIL_CLOSE
            self.reusable = False

    def _read_chunks(self) -> None:
        buffer = self._buffer
        while True:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                if len(buffer) > _MAX_CHUNK_LINE:
                    raise httpx.RemoteProtocolError("a chunk-size line is over 4 KiB")
                return
            digits = bytes(buffer[:line_end]).split(b";", 1)[0].strip()
            if not digits or digits.strip(_HEX_DIGITS):  # no sign, 0x or _ as int() would allow
                raise httpx.RemoteProtocolError(f"malformed chunk size {digits[:20]!r}")
            size = int(digits, 16)
            if size == 0:  # the last chunk, then optional trailers and a blank line
                if buffer[line_end + 2 : line_end + 4] == b"\r\n":
                    end = line_end + 4
                else:
                    end = buffer.find(b"\r\n\r\n", line_end)
                    if end < 0:
                        return
                    end += 4
                del buffer[:end]
                if buffer:
                    self.reusable = False
                self._finish(b"".join(self._chunks))
                return
            start = line_end + 2
            if len(buffer) < start + size + 2:
                return
            if buffer[start + size : start + size + 2] != b"\r\n":
                raise httpx.RemoteProtocolError("a chunk's data is not followed by CRLF")
            self._chunks.append(bytes(buffer[start : start + size]))
            del buffer[: start + size + 2]


_Key = tuple[str, int, bool]  # host, port, TLS
# Some gateways refuse requests without a User-Agent; the caller's own one replaces it.
_DEFAULT_HEADERS = {"user-agent": ("User-Agent", "beam-llm-evaluator")}


def _readable(fd: int) -> bool:
    """True when ``fd`` has input (or EOF) waiting; poll where there is one (select stops at fd 1024)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


class Http11Client:
    """Keep-alive HTTP/1.1 connections per origin, reused most-recently-released first.

    Args:
        max_connections: open connections per origin; more requests wait (up to
            ``timeout``) for a free one.
        timeout: seconds to connect, to wait for a free connection, and from sending a
            request to its full reply.
        headers: default headers for every request (a per-request header replaces the
            default of the same name, in any case; ``Host`` replaces the automatic one).
        ssl_context: for https URLs (httpx's default context when None).

    """

    def __init__(
        self,
        max_connections: int,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._max_connections = max(1, max_connections)
        self._timeout = timeout
        self._headers = {**_DEFAULT_HEADERS, **_by_lower_name(headers or {})}
        self._default_block = _header_block(self._headers)
        self._ssl_context = ssl_context
        self._origins: dict[str, _Origin] = {}
        self._idle: dict[_Key, list[_Connection]] = {}
        self._open: dict[_Key, int] = {}
        self._waiters: dict[_Key, deque[asyncio.Future[_Connection | None]]] = {}
        self._closed = False

    async def post(self, url: str, *, content: bytes, headers: Mapping[str, str] | None = None) -> HttpResponse:
        """POST ``content`` (JSON) and return the fully read reply."""
        origin = self._origins.get(url)
        if origin is None:
            origin = self._origin(url)
        if headers is None:
            block, own_host = self._default_block, "host" in self._headers
        else:
            merged = {**self._headers, **_by_lower_name(headers)}
            block, own_host = _header_block(merged), "host" in merged
        host = b"" if own_host else origin.host_line
        message = b"%s%s%sContent-Length: %d\r\n\r\n%s" % (origin.request_line, host, block, len(content), content)
        key = (origin.host, origin.port, origin.tls)
        connection = await self._acquire(key, origin)
        try:
            response = await connection.request(message, self._timeout)
        finally:
            self._release(key, connection)
        return response

    async def aclose(self) -> None:
        """Close every connection; requests waiting for one fail."""
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.abort()
        self._idle.clear()
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        self._waiters.clear()

    def _origin(self, url: str) -> _Origin:
        try:
            parts = urlsplit(url)
            port = parts.port
            host = parts.hostname or ""
            ascii_host = host.encode("idna").decode("ascii")
        except (ValueError, UnicodeError) as exc:
            raise httpx.InvalidURL(f"invalid URL: {exc}") from None
        if parts.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"the URL scheme must be http or https, not {parts.scheme!r}")
        if not host:
            raise httpx.InvalidURL("the URL has no host")
        if parts.username is not None or parts.password is not None:
            raise httpx.InvalidURL("the URL carries credentials (user:password@); put the key in api_key_env instead")
        tls = parts.scheme == "https"
        shown = f"[{ascii_host}]" if ":" in ascii_host else ascii_host
        if port is not None:
            shown = f"{shown}:{port}"
        target = quote(parts.path or "/", safe=_PATH_SAFE)
        if parts.query:
            target = f"{target}?{quote(parts.query, safe=_QUERY_SAFE)}"
        origin = _Origin(
            ascii_host,
            port or (443 if tls else 80),
            tls,
            f"POST {target} HTTP/1.1\r\n".encode("ascii"),
            f"Host: {shown}\r\n".encode("ascii"),
        )
        if len(self._origins) >= 256:
            self._origins.clear()
        self._origins[url] = origin
        return origin

    async def _acquire(self, key: _Key, origin: _Origin) -> _Connection:
        """An idle connection that is still open, a released one, or a new one."""
        while True:
            if self._closed:
                raise httpx.ConnectError("the client is closed")
            idle = self._idle.get(key)
            connection = idle.pop() if idle else None
            if connection is None and self._open.get(key, 0) >= self._max_connections:
                connection = await self._wait_for_connection(key)
                if connection is None:  # a slot was freed (or the client closed): open a new one
                    continue
            if connection is None:
                self._open[key] = self._open.get(key, 0) + 1
                try:
                    return await self._connect(origin)
                except BaseException:
                    self._discarded(key)
                    raise
            if connection.usable():
                return connection
            connection.abort()  # the server closed it while idle
            self._discarded(key)

    async def _wait_for_connection(self, key: _Key) -> _Connection | None:
        """Wait (up to the timeout) for a released connection or a free slot.

        The waiter is awaited directly with a timer, not through ``asyncio.wait_for``, which
        on Python 3.10-3.11 can swallow a cancel that arrives as the connection is handed over.
        """
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[_Connection | None] = loop.create_future()
        self._waiters.setdefault(key, deque()).append(waiter)
        timer = loop.call_later(self._timeout, _expire, waiter, self._timeout)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:  # handed over, then cancelled
                handed = waiter.result()
                if handed is not None:
                    self._release(key, handed)
                else:
                    self._wake(key, None)
            raise
        finally:
            timer.cancel()

    def _release(self, key: _Key, connection: _Connection) -> None:
        if connection.reusable and not connection.closed and not self._closed:
            if not self._wake(key, connection):
                self._idle.setdefault(key, []).append(connection)
            return
        connection.abort()
        self._discarded(key)

    def _discarded(self, key: _Key) -> None:
        """A connection (or a connection attempt) is gone: its slot goes to a waiter, if any."""
        self._open[key] -= 1
        self._wake(key, None)

    def _wake(self, key: _Key, connection: _Connection | None) -> bool:
        """Hand ``connection`` (or a free slot, when None) to the first waiter; False if none waits."""
        waiters = self._waiters.get(key)
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # with None, the free slot passes to the waiter, which counts itself
                waiter.set_result(connection)
                return True
        return False

    async def _connect(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        context = None
        if origin.tls:
            if self._ssl_context is None:
                self._ssl_context = httpx.create_ssl_context()
            context = self._ssl_context
        # A task and asyncio.wait rather than asyncio.wait_for, which on Python 3.10-3.11 can
        # swallow a cancel that arrives just as the connection is made.
        attempt = loop.create_task(
            loop.create_connection(
                lambda: _Connection(loop),
                origin.host,
                origin.port,
                ssl=context,
                server_hostname=origin.host if context is not None else None,
            )
        )
        try:
            done, _ = await asyncio.wait({attempt}, timeout=self._timeout)
        except asyncio.CancelledError:
            _abandon(attempt)
            raise
        if not done:
            _abandon(attempt)
            raise httpx.ConnectTimeout(f"no connection within {self._timeout:g} s")
        try:
            _, connection = attempt.result()
        except OSError as exc:
            raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from exc
        return connection


def _expire(waiter: asyncio.Future[_Connection | None], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.PoolTimeout(f"no free connection within {timeout:g} s"))


def _abandon(attempt: asyncio.Task[tuple[asyncio.BaseTransport, _Connection]]) -> None:
    """Cancel a connection attempt; should it have just succeeded, drop the connection."""
    attempt.cancel()

    def drop(task: asyncio.Task[tuple[asyncio.BaseTransport, _Connection]]) -> None:
        if not task.cancelled() and task.exception() is None:
            task.result()[1].abort()

    attempt.add_done_callback(drop)


def _by_lower_name(headers: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Headers keyed by lower-cased name (so a later one replaces an earlier one in any case).

    ``Content-Length`` is dropped: the client sets it from the body.
    """
    return {name.lower(): (name, value) for name, value in headers.items() if name.lower() != "content-length"}


def _decoded(body: bytes, encoding: str) -> bytes:
    """Undo a Content-Encoding the server applied unasked (we send no Accept-Encoding)."""
    for coding in reversed([part.strip().lower() for part in encoding.split(",")]):
        try:
            if coding in ("gzip", "x-gzip"):
                body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
            elif coding == "deflate":  # zlib-wrapped as the RFC says, or raw as some servers send
                try:
                    body = zlib.decompress(body)
                except zlib.error:
                    body = zlib.decompress(body, -zlib.MAX_WBITS)
            elif coding not in ("identity", ""):
                raise httpx.DecodingError(f"the reply uses Content-Encoding {coding!r}, which is not supported")
        except zlib.error as exc:
            raise httpx.DecodingError(f"the reply's {coding} body cannot be decoded: {exc}") from None
    return body


def _header_block(headers: Mapping[str, tuple[str, str]]) -> bytes:
    """Encode header lines, refusing CR, LF and NUL (they would let a value inject a request)."""
    lines = []
    for name, value in headers.values():
        line = f"{name}: {value}"
        if any(char in line for char in "\r\n\0"):
            raise httpx.LocalProtocolError(f"header {name!r} holds a line break or NUL")
        lines.append(line)
    try:
        return "".join(f"{line}\r\n" for line in lines).encode("latin-1")
    except UnicodeEncodeError:
        raise httpx.LocalProtocolError("header values must be Latin-1 text") from None
