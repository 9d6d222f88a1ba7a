"""Throughput of InferenceEngine.submit vs a bare asyncio+httpx loop against the test server.

Run: python -m tests.inference.bench_engine [--requests 5000] [--parallelism 64] [--latency-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import time

import httpx

from inference.engine import InferenceEngine
from inference.targets import make_handler
from pipeline.config import ModelTarget, Params, TargetConfig
from testserver.harness import ServerProcess


def bare(base_url: str, n: int, parallelism: int) -> float:
    async def main() -> float:
        limits = httpx.Limits(max_connections=parallelism, max_keepalive_connections=parallelism)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            counter = iter(range(n))

            async def worker() -> None:
                for i in counter:
                    body = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}
                    response = await client.post(f"{base_url}/chat/completions", json=body)
                    response.raise_for_status()
                    response.json()["choices"][0]["message"]["content"]

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(parallelism)))
            return n / (time.perf_counter() - start)

    return asyncio.run(main())


def engine_rate(base_url: str, n: int, parallelism: int) -> tuple[float, int]:
    target = TargetConfig(model=ModelTarget(url=base_url, name="m", format="openai"))
    params = Params(parallelism=parallelism)
    handler = make_handler(target, params, None)
    engine = InferenceEngine(handler, parallelism, 3, 60)
    # warm-up (connections), as the bare loop's pool also fills on its first round
    list(concurrent.futures.as_completed([engine.submit(handler.prepare("warm"), handler) for _ in range(parallelism)]))
    engine.snapshot_counters()
    start = time.perf_counter()
    futures = [
        engine.submit(handler.prepare({"messages": [{"role": "user", "content": f"q{i}"}]}), handler) for i in range(n)
    ]
    ok = sum(1 for f in concurrent.futures.as_completed(futures) if f.result().ok)
    rate = n / (time.perf_counter() - start)
    engine.close()
    return rate, ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--parallelism", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with ServerProcess(latency_ms=args.latency_ms) as server:
        bare(server.base_url, 500, args.parallelism)  # warm the server
        for _ in range(args.rounds):
            b = bare(server.base_url, args.requests, args.parallelism)
            e, ok = engine_rate(server.base_url, args.requests, args.parallelism)
            print(
                f"bare {b:7.0f} rows/s   engine {e:7.0f} rows/s   ratio {e / b:.2f}   ok {ok}/{args.requests}"
                f"   peak {server.stats()['peak_in_flight']}"
            )


if __name__ == "__main__":
    main()
