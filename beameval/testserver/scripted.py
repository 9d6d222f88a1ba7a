"""A raw scripted HTTP server for client protocol tests: the n-th request gets the n-th canned bytes.

The OpenAI-compatible server (``beameval.testserver.app``, on aiohttp.web) always speaks
well-formed HTTP; a client's parser also needs chunk extensions, replies split into single
bytes, interim ``1xx`` replies, early closes, resets and plainly malformed framing. This
server writes exactly the bytes a test gives it, on 127.0.0.1, and records what the
client sent: the project's one hand-framed HTTP server, kept for deliberately broken HTTP.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from beameval.testserver.loopback import HOST, LoopbackServer
from beameval.testserver.wire import abort_with_reset

__all__ = ["HOST", "ScriptedServer", "Seen", "Step", "reply"]


def reply(status: int = 200, body: bytes = b"ok", headers: dict[str, str] | None = None) -> bytes:
    """A well-formed Content-Length reply, so each test only spells out the bytes it is about."""
    lines = [f"HTTP/1.1 {status} Whatever", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class Step:
    """What the scripted server does after reading one request.

    Attributes:
        data: bytes written back (may be empty).
        split: write ``data`` one byte at a time, yielding between writes, so the client parses fragments.
        then: ``keep`` reads the next request on the connection; ``close`` shuts it (FIN); ``reset``
            aborts it with an RST; ``hang`` writes nothing more and waits until the client hangs up.
        hold: when set, the reply waits until this event is set (a request kept in flight).
    """

    data: bytes = b""
    split: bool = False
    then: Literal["keep", "close", "reset", "hang"] = "keep"
    hold: asyncio.Event | None = None


class Seen(NamedTuple):
    """One request as the scripted server read it: which connection (0-based), raw head and body."""

    connection: int
    head: bytes
    body: bytes

    @property
    def request_line(self) -> str:
        return self.head.split(b"\r\n", 1)[0].decode("latin-1")

    def header_lines(self) -> list[str]:
        """The raw header lines, in order, with their original case (duplicates kept)."""
        return self.head.decode("latin-1").split("\r\n")[1:-2]

    def header(self, name: str) -> list[str]:
        """Every value sent for ``name`` (case-insensitive), so duplicates are visible."""
        values = []
        for line in self.header_lines():
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                values.append(value.strip())
        return values


UNSCRIPTED = reply(599, b"no step left for this request")


@dataclass
class ScriptedServer(LoopbackServer):
    """A loopback server answering the n-th request with the n-th :class:`Step`, whatever the connection.

    Counts accepted connections and those the client closed, and records every request, so tests can
    assert what went over the wire. Bound to 127.0.0.1 on a free port; closed on exit.
    """

    steps: list[Step]
    ssl_context: ssl.SSLContext | None = None
    connections: int = 0
    closed_by_client: int = 0
    requests: list[Seen] = field(default_factory=list)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def _ssl(self) -> ssl.SSLContext | None:
        return self.ssl_context

    async def _end_handlers(self) -> None:
        """Abort the connections: the handlers then end on EOF (cancelling them makes 3.11 log noise)."""
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 2.0)

    def url(self, path: str = "/v1/chat/completions", userinfo: str = "") -> str:
        """The server's URL for ``path`` (``userinfo`` such as ``"user:pass@"`` goes before the host)."""
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{userinfo}{HOST}:{self.port}{path}"

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 2.0) -> None:
        """Poll until ``condition`` holds: the server sees closes a loop pass or two after the client acts."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "condition not met in time"
            await asyncio.sleep(0.01)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = self._track()
        self._writers.add(writer)
        number = self.connections
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client += 1
                    return
                length = 0
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.requests.append(Seen(number, head, body))
                step = self.steps.pop(0) if self.steps else Step(UNSCRIPTED)
                if step.hold is not None:
                    await step.hold.wait()
                if step.split:
                    for index in range(len(step.data)):
                        writer.write(step.data[index : index + 1])
                        await writer.drain()
                        await asyncio.sleep(0.0005)
                else:
                    writer.write(step.data)
                    await writer.drain()
                if step.then == "close":
                    return
                if step.then == "reset":
                    abort_with_reset(writer.transport)
                    return
                if step.then == "hang":
                    await reader.read()  # until the client gives up and closes
                    self.closed_by_client += 1
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()
