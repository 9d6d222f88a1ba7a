"""Keep-alive connections split over several small httpx pools: httpx's pool bookkeeping is quadratic in its size."""

from __future__ import annotations

import math
from collections.abc import Mapping

import httpx

__all__ = ["SHARD_CONNECTIONS", "ShardedClient"]

SHARD_CONNECTIONS = 8


class ShardedClient:
    """``parallelism`` connections as ``ceil(parallelism / 8)`` httpx.AsyncClients of at most 8 each.

    httpcore re-scans every pooled connection (and, for each idle one, every connection
    again) whenever a request enters or leaves its pool; at 64 connections that costs more
    CPU than the request itself. Each request goes to the shard with the most free
    connections, so as long as callers keep at most ``parallelism`` requests in flight (the
    limiter does), no request ever waits for a connection.

    Args:
        parallelism: total connections (the most requests in flight).
        timeout: seconds for each of connect, read, write and pool acquisition.
        headers: default headers for every request.
        shard_connections: connections per shard.
        transport: an httpx transport to use instead of the network (tests).
    """

    __slots__ = ("_clients", "_free")

    def __init__(
        self,
        parallelism: int,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        *,
        shard_connections: int = SHARD_CONNECTIONS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        shards = max(1, math.ceil(parallelism / max(1, shard_connections)))
        base, extra = divmod(parallelism, shards)
        self._clients = []
        self._free = []
        for index in range(shards):
            size = max(1, base + (1 if index < extra else 0))
            self._free.append(size)
            self._clients.append(
                httpx.AsyncClient(
                    headers=headers,
                    timeout=httpx.Timeout(timeout),
                    limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
                    transport=transport,
                )
            )

    @property
    def shards(self) -> int:
        """How many httpx clients the connections are split over."""
        return len(self._clients)

    async def post(self, url: str, *, content: bytes, headers: Mapping[str, str] | None = None) -> httpx.Response:
        """POST ``content`` on the shard with the most free connections; return the fully read response."""
        free = self._free
        index = free.index(max(free)) if len(free) > 1 else 0
        free[index] -= 1
        try:
            return await self._clients[index].post(url, content=content, headers=headers)
        finally:
            free[index] += 1

    async def aclose(self) -> None:
        """Close every shard's connections."""
        for client in self._clients:
            await client.aclose()
