"""The shared frame of the test servers that speak raw bytes: a loopback listener whose handlers end with it.

``ScriptedServer`` (canned replies) and ``ForwardingProxy`` (CONNECT and absolute-form
forwarding) differ in what a connection does, not in how they start and stop: bound to
127.0.0.1 on a free port on entry; on exit the listener closes, every live connection
handler is ended (``_end_handlers``) and the close is awaited, so a test never leaves a
task or a socket behind.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

__all__ = ["HOST", "LoopbackServer"]

HOST = "127.0.0.1"


@dataclass
class LoopbackServer:
    """Use as ``async with``; subclasses write ``_serve`` and call ``_track`` first thing in it."""

    _server: asyncio.Server | None = field(default=None, kw_only=True)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, kw_only=True)

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, HOST, 0, ssl=self._ssl())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        await self._end_handlers()
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        """The free port the listener was bound to."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def _ssl(self) -> ssl.SSLContext | None:
        """The listener's TLS context (None: plain TCP)."""
        return None

    def _track(self) -> asyncio.Task[Any]:
        """Record the running handler so that exit can end it; the handler discards it when done."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        return task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _end_handlers(self) -> None:
        """End the live handlers: cancelled here; a subclass may end them more gently."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
