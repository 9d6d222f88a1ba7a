"""The engine's HTTP client: the lean HTTP/1.1 client, or httpx when the environment names a proxy."""

from __future__ import annotations

import math
import urllib.request
from collections import deque
from collections.abc import Mapping

import httpx

from inference.http11 import Http11Client

__all__ = ["SHARD_CONNECTIONS", "ShardedClient", "make_client", "proxy_configured"]

SHARD_CONNECTIONS = 1


def proxy_configured() -> bool:
    """True when HTTP_PROXY, HTTPS_PROXY or ALL_PROXY (any case) is set: httpx then applies them and NO_PROXY."""
    return bool({"http", "https", "all"} & set(urllib.request.getproxies_environment()))


def make_client(
    parallelism: int, timeout: float, headers: Mapping[str, str] | None = None
) -> Http11Client | ShardedClient:
    """Return the client for an engine: ``Http11Client`` unless a proxy is configured.

    Args:
        parallelism: the most requests in flight (one connection each).
        timeout: seconds per attempt (connect, and request to full reply).
        headers: default headers for every request.

    """
    if proxy_configured():
        return ShardedClient(parallelism, timeout, headers)
    return Http11Client(parallelism, timeout, headers)  # builds its SSL context on the first https connect


class ShardedClient:
    """``parallelism`` connections as ``ceil(parallelism / shard_connections)`` httpx.AsyncClients.

    httpcore re-scans every pooled connection (and, for each idle one, every connection
    again) whenever a request enters or leaves its pool, so its CPU per request grows with
    the pool. Against the local test server at parallelism 64 and 0-20 ms latency (the
    client CPU-bound), one client per connection gave about 1.45x the requests/s of shards
    of 8 (0.65 vs 0.91 ms of client CPU per request; docs/BENCHMARKS.md); at a fixed
    100 ms (latency-bound) shards of 8 were about 3% faster. A request takes a free connection slot
    (most recently released first, so a light load keeps reusing a few warm connections)
    and the shard that owns it; as long as callers keep at most ``parallelism`` requests in
    flight (the limiter does), no request ever waits for a connection. Beyond that, extra
    requests go round-robin to the shards and wait in their pools. All shards share one
    SSL context (building one per client costs about 20 ms of CPU each), and each URL is
    parsed once (httpx parses a str URL again on every request, about 12 us).

    Args:
        parallelism: total connections (the most requests in flight).
        timeout: seconds for each of connect, read, write and pool acquisition.
        headers: default headers for every request.
        shard_connections: connections per shard.
        transport: an httpx transport to use instead of the network (tests).
    """

    __slots__ = ("_clients", "_free", "_overflow", "_urls")

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
        verify = httpx.create_ssl_context() if transport is None else True
        self._clients: list[httpx.AsyncClient] = []
        self._free: deque[int] = deque()  # one entry per free connection: its shard's index
        self._overflow = 0
        self._urls: dict[str, httpx.URL] = {}  # parsed once: httpx re-parses a str URL on every request
        for index in range(shards):
            size = max(1, base + (1 if index < extra else 0))
            self._free.extend([index] * size)
            self._clients.append(
                httpx.AsyncClient(
                    headers=headers,
                    timeout=httpx.Timeout(timeout),
                    limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
                    transport=transport,
                    verify=verify,
                )
            )
        self._free.reverse()  # the first shards are used first

    @property
    def shards(self) -> int:
        """How many httpx clients the connections are split over."""
        return len(self._clients)

    async def post(self, url: str, *, content: bytes, headers: Mapping[str, str] | None = None) -> httpx.Response:
        """POST ``content`` on a shard with a free connection; return the fully read response."""
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= 256:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        free = self._free
        if free:
            index = free.pop()
        else:  # more requests than connections: queue in the shards' pools, spread evenly
            index = self._overflow % len(self._clients)
            self._overflow += 1
            return await self._clients[index].post(parsed, content=content, headers=headers)
        try:
            return await self._clients[index].post(parsed, content=content, headers=headers)
        finally:
            free.append(index)

    async def aclose(self) -> None:
        """Close every shard's connections."""
        for client in self._clients:
            await client.aclose()
