"""Quick throughput check of the stub server, so benchmarks know it is never the bottleneck.

Usage::

    python -m testserver.loadtest [--concurrency 64] [--seconds 5] [--client httpx|httpx-many|raw]

``httpx`` drives it with one shared ``httpx.AsyncClient`` (whose connection pool
costs O(connections) per request, so it tops out early at high concurrency);
``httpx-many`` gives each task its own AsyncClient; ``raw`` uses bare asyncio
keep-alive sockets, to see the server's own ceiling without httpx's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable

import httpx

from testserver.harness import ServerProcess

Call = Callable[[], Awaitable[None]]
_BODY = {"model": "test-model", "messages": [{"role": "user", "content": "What is the capital of France?"}]}


async def _run_workers(concurrency: int, seconds: float, make: Callable[[], Awaitable[Call]]) -> int:
    deadline = time.perf_counter() + seconds
    done = 0

    async def worker() -> None:
        nonlocal done
        call = await make()
        while time.perf_counter() < deadline:
            await call()
            done += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


async def run_httpx(base_url: str, concurrency: int, seconds: float) -> int:
    """Issue chat requests from ``concurrency`` tasks sharing one AsyncClient; return the count."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, trust_env=False, timeout=30) as client:

        async def make() -> Call:
            async def call() -> None:
                response = await client.post("/chat/completions", json=_BODY)
                response.raise_for_status()

            return call

        return await _run_workers(concurrency, seconds, make)


async def run_httpx_many(base_url: str, concurrency: int, seconds: float) -> int:
    """Like :func:`run_httpx` but one AsyncClient per task, sidestepping httpcore's pool bookkeeping."""
    clients: list[httpx.AsyncClient] = []

    async def make() -> Call:
        client = httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=30)
        clients.append(client)

        async def call() -> None:
            response = await client.post("/chat/completions", json=_BODY)
            response.raise_for_status()

        return call

    try:
        return await _run_workers(concurrency, seconds, make)
    finally:
        for client in clients:
            await client.aclose()


async def run_raw(port: int, concurrency: int, seconds: float) -> int:
    """Same load from bare keep-alive sockets (one per task); return the count."""
    payload = json.dumps(_BODY).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    writers: list[asyncio.StreamWriter] = []

    async def make() -> Call:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writers.append(writer)

        async def call() -> None:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)

        return call

    try:
        return await _run_workers(concurrency, seconds, make)
    finally:
        for writer in writers:
            writer.close()


def cpu_seconds(pid: int | None) -> float | None:
    """User+system CPU seconds used so far by ``pid`` (Linux /proc only, else None)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    """Start a server, load it, print requests per second."""
    parser = argparse.ArgumentParser(prog="python -m testserver.loadtest")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--client", choices=("httpx", "httpx-many", "raw"), default="httpx")
    args = parser.parse_args()
    with ServerProcess() as server:
        cpu_before = cpu_seconds(server.pid)
        started = time.perf_counter()
        if args.client == "httpx":
            count = asyncio.run(run_httpx(server.base_url, args.concurrency, args.seconds))
        elif args.client == "httpx-many":
            count = asyncio.run(run_httpx_many(server.base_url, args.concurrency, args.seconds))
        else:
            count = asyncio.run(run_raw(server.port, args.concurrency, args.seconds))
        elapsed = time.perf_counter() - started
        cpu_after = cpu_seconds(server.pid)
        stats = server.stats()
    line = (
        f"client={args.client} concurrency={args.concurrency} requests={count} "
        f"seconds={elapsed:.2f} rps={count / elapsed:.0f} server_by_status={stats['by_status']}"
    )
    if cpu_before is not None and cpu_after is not None and cpu_after > cpu_before:
        used = cpu_after - cpu_before
        line += f" server_cpu_s={used:.2f} server_rps_per_core={count / used:.0f}"
    print(line)


if __name__ == "__main__":
    main()
