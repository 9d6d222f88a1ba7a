"""A small forwarding proxy on 127.0.0.1, for testing that the client honours proxy variables.

It speaks the two forms a client uses: ``CONNECT host:port`` (a TLS tunnel; the proxy copies
bytes both ways and never sees the plaintext) and absolute-form requests for plain http
(``POST http://host:port/path HTTP/1.1``), which it forwards on a fresh connection with the
path made relative. Every request line it receives is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from beameval.testserver.loopback import HOST, LoopbackServer

__all__ = ["ForwardingProxy"]


@dataclass
class ForwardingProxy(LoopbackServer):
    """Use as ``async with ForwardingProxy() as proxy``; ``proxy.url`` goes in ``HTTP(S)_PROXY``."""

    seen: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = self._track()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, _, rest = head.partition(b"\r\n")
            method, target, version = request_line.decode("latin-1").split(" ", 2)
            self.seen.append(f"{method} {target}")
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await _pipe_both(reader, writer, upstream_reader, upstream_writer)
                return
            parts = urlsplit(target)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            upstream_reader, upstream_writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
            upstream_writer.write(f"{method} {path} {version}\r\n".encode("latin-1") + rest)
            await _pipe_both(reader, writer, upstream_reader, upstream_writer)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError, OSError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()


async def _pipe_both(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        with contextlib.suppress(OSError, RuntimeError):
            sink.write_eof()

    try:
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))
    finally:
        upstream_writer.close()
