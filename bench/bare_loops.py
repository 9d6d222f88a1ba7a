"""The bare client loops the inference benchmark compares against, run as a child process.

Usage: ``python bench/bare_loops.py BASE_URL DATASET.jsonl MODE`` prints
``{"rows", "ok", "matches", "elapsed_s"}`` as JSON. Kept apart from the benchmark so a
baseline loads nothing but asyncio and its HTTP client.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

MODEL = "bench-model"
PARALLELISM = 64


async def bare_loop(base_url: str, rows: list[dict[str, str]], parallelism: int, mode: str) -> dict[str, Any]:
    """``parallelism`` coroutines POST the rows' prompts.

    ``mode``: ``aiohttp`` (one shared ``ClientSession`` with a 64-connection
    ``TCPConnector``: what the evaluator's transport is built on, without the evaluator),
    ``httpx`` (one httpx.AsyncClient per coroutine: 4-5x faster than one shared
    client, whose pool bookkeeping grows with its size) or ``raw`` (one asyncio stream per
    coroutine, the request written by hand, the reply read by its Content-Length: about
    as little work as a Python client can do).
    """
    todo = iter(rows)
    tally = {"ok": 0, "matches": 0}

    def tally_reply(row: dict[str, str], reply: Any) -> None:
        text = reply["choices"][0]["message"]["content"]
        tally["ok"] += 1
        tally["matches"] += text.strip() == row["answer"].strip()

    def body(row: dict[str, str]) -> dict[str, Any]:
        return {"model": MODEL, "messages": [{"role": "user", "content": row["question"]}]}

    if mode == "raw":
        from urllib.parse import urlsplit

        parts = urlsplit(f"{base_url}/chat/completions")
        head = f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"

        async def raw_worker() -> None:
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
            for row in todo:
                payload = json.dumps(body(row)).encode()
                writer.write(f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
                reply_head = await reader.readuntil(b"\r\n\r\n")
                if not reply_head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(reply_head[:40])
                length = int(reply_head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                tally_reply(row, json.loads(await reader.readexactly(length)))
            writer.close()

        started = time.perf_counter()
        await asyncio.gather(*(raw_worker() for _ in range(parallelism)))
        return {"rows": len(rows), "elapsed_s": time.perf_counter() - started, **tally}

    url = f"{base_url}/chat/completions"
    if mode == "aiohttp":
        import aiohttp

        async def aiohttp_worker(session: aiohttp.ClientSession) -> None:
            for row in todo:
                async with session.post(url, json=body(row)) as response:
                    response.raise_for_status()
                    tally_reply(row, await response.json())

        connector = aiohttp.TCPConnector(limit=parallelism)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            started = time.perf_counter()
            await asyncio.gather(*(aiohttp_worker(session) for _ in range(parallelism)))
            elapsed = time.perf_counter() - started
        return {"rows": len(rows), "elapsed_s": elapsed, **tally}

    import httpx

    async def worker(client: httpx.AsyncClient) -> None:
        for row in todo:
            response = await client.post(url, json=body(row))
            response.raise_for_status()
            tally_reply(row, response.json())

    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [httpx.AsyncClient(limits=limits, timeout=60, trust_env=False) for _ in range(parallelism)]
    started = time.perf_counter()
    await asyncio.gather(*(worker(client) for client in clients))
    elapsed = time.perf_counter() - started
    for each in clients:
        await each.aclose()
    return {"rows": len(rows), "elapsed_s": elapsed, **tally}


def read_rows(dataset: str) -> list[dict[str, str]]:
    """The dataset's rows (one JSON object per line)."""
    with open(dataset, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def main(base_url: str, dataset: str, mode: str) -> int:
    print(json.dumps(asyncio.run(bare_loop(base_url, read_rows(dataset), PARALLELISM, mode))))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
