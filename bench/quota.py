"""Quota benchmark: how much of a provider's per-minute limit a fleet of worker processes uses, and how many 429s.

The test server enforces OpenAI-style limits (``FaultConfig.quota``: request and token
buckets refilled continuously, one second of burst, 429 with ``Retry-After`` past them)
and answers after 50 ms. Each scenario runs ``python -m pipeline.run`` on the local
runner with W worker processes (``multi_processing``) at ``parallelism`` 64 and reads
the server's per-second timeline (``/_stats`` ``quota``):

* utilisation: requests (or tokens) admitted per second over the busy window
  (first request to last answer), as a share of R/60 (T/60);
* 429 share: 429 answers / all answers;
* worst 5 s: the most requests admitted in 5 consecutive seconds, as a share of 5 R/60.

Scenarios (R = 1,200 requests a minute unless said):

* ``shared-2``, ``shared-4``: ``rate_limit`` R with ``shared`` (a redis-server started here);
* ``split-2``, ``split-4``: ``rate_limit`` R without ``shared``: each worker keeps R/W;
* ``headers-2``: no ``rate_limit``; the server sends ``x-ratelimit-*`` headers;
* ``tokens-2``: ``tokens_per_minute`` T = 12,000 shared (no request limit), longer prompts;
* ``before-2``: no ``rate_limit`` and no headers: only the adaptive concurrency limit
  per worker, as before rate pacing existed.

Usage::

    python bench/quota.py --scenarios shared-2,headers-2   # a few; each takes ~30 s of sending
    python bench/quota.py                                  # all of them
    python bench/quota.py --smoke                          # tiny, for CI

Prints a markdown table and writes JSON to ``bench/results/quota-<time>.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from beameval.testserver.harness import ServerProcess, free_port  # noqa: E402  (needs the project root)
from bench.sides import our_env  # noqa: E402

RPM = 1200
TPM = 12_000
LATENCY_MS = 50
PARALLELISM = 64
WINDOW_S = 30  # seconds of sending per scenario at the full rate


@dataclass(frozen=True)
class Scenario:
    """One fleet against one limit."""

    workers: int
    rate_limit: str  # "shared" | "split" | "none"
    headers: bool = False
    tokens: bool = False


SCENARIOS = {
    "shared-2": Scenario(2, "shared"),
    "shared-4": Scenario(4, "shared"),
    "split-2": Scenario(2, "split"),
    "split-4": Scenario(4, "split"),
    "headers-2": Scenario(2, "none", headers=True),
    "tokens-2": Scenario(2, "shared", tokens=True),
    "before-2": Scenario(2, "none"),
    "shared-1": Scenario(1, "shared"),
    "headers-1": Scenario(1, "none", headers=True),
}
#: The smoke run: one worker process (the in-memory runner starts in seconds), shared and headers.
SMOKE = ("shared-1", "headers-1")


class Redis:
    """A redis-server on 127.0.0.1 for the shared scenarios (no persistence), stopped on exit."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed (apt-get install -y redis-server)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=directory,
            stdout=subprocess.DEVNULL,
        )
        import redis

        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)


def dataset(path: Path, rows: int, tokens: bool) -> None:
    """Rows whose prompt the server echoes: 2 words, or 12 for the tokens scenario."""
    filler = " alpha beta gamma delta epsilon zeta eta theta iota kappa" if tokens else ""
    path.write_text(
        "".join(json.dumps({"question": f"answer {i}{filler}", "answer": f"answer {i}"}) + "\n" for i in range(rows))
    )


def run_scenario(
    name: str, scenario: Scenario, server: ServerProcess, redis_url: str, work: Path, window_s: float
) -> dict[str, Any]:
    quota: dict[str, Any] = {"headers": scenario.headers}
    per_row_tokens = 24 if scenario.tokens else 4
    if scenario.tokens:
        quota["tokens_per_minute"] = TPM
        rows = int(window_s * TPM / 60 / per_row_tokens)
    else:
        quota["requests_per_minute"] = RPM
        rows = int(window_s * RPM / 60)
    server.reset(config=True)
    server.configure(latency_ms=LATENCY_MS, quota=quota)
    data = work / f"{name}.jsonl"
    dataset(data, rows, scenario.tokens)
    model: dict[str, Any] = {"url": server.base_url, "name": "bench", "format": "openai"}
    if scenario.rate_limit != "none":
        limit: dict[str, Any] = {"tokens_per_minute": TPM} if scenario.tokens else {"requests_per_minute": RPM}
        if scenario.rate_limit == "shared":
            limit["shared"] = redis_url
        model["rate_limit"] = limit
    config = {
        "dataset": {"path": str(data)},
        "target": {"model": model},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {
            "parallelism": PARALLELISM,
            "max_retries": 3,
            "ignore_request_failure": True,
            "max_error_rate": 1.0,
            "inference": {"max_tokens": 16 if scenario.tokens else 4},
        },
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    config_path = work / f"{name}.json"
    config_path.write_text(json.dumps(config))
    out = work / f"out-{name}"
    cmd = [sys.executable, "-m", "pipeline.run", "--config", str(config_path), "--output", str(out), "--overwrite"]
    if scenario.workers > 1:
        cmd += ["--direct_running_mode=multi_processing", f"--direct_num_workers={scenario.workers}"]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, env=our_env(), capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{name}: the run failed ({done.returncode}): {done.stderr[-2000:]}")
    results = json.loads((out / "results.json").read_text())
    return measure(name, scenario, server.stats(), results, rows, wall)


def measure(
    name: str, scenario: Scenario, stats: dict[str, Any], results: dict[str, Any], rows: int, wall: float
) -> dict[str, Any]:
    """Utilisation, 429 share and the worst 5-second window, from the server's timeline."""
    quota = stats["quota"]
    timeline = quota["timeline"]
    busy = stats["busy_s"] or float("nan")
    admitted, limited = quota["admitted_requests"], quota["limited"]
    per_s = RPM / 60
    if scenario.tokens:
        used = quota["tokens"] / busy / (TPM / 60)
        window = [second["tokens"] for second in timeline]
        limit_5s = 5 * TPM / 60
    else:
        used = admitted / busy / per_s
        window = [second["requests"] for second in timeline]
        limit_5s = 5 * per_s
    worst = max((sum(window[i : i + 5]) for i in range(max(1, len(window) - 4))), default=0)
    return {
        "scenario": name,
        "workers": scenario.workers,
        "rate_limit": scenario.rate_limit,
        "headers": scenario.headers,
        "limit": f"{TPM} tokens/min" if scenario.tokens else f"{RPM} requests/min",
        "rows": rows,
        "ok": results["counts"]["ok"],
        "failed": results["counts"]["errors"],
        "admitted": admitted,
        "answered_429": limited,
        "share_429": limited / max(1, admitted + limited),
        "busy_s": round(busy, 2),
        "wall_s": round(wall, 1),
        "utilisation": round(used, 3),
        "worst_5s": round(worst / limit_5s, 3),
        "timeline": [[second["requests"], second["limited"]] for second in timeline],  # admitted, 429 per second
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | workers | limit | rate_limit | headers | utilisation | 429 share | worst 5 s / limit "
        "| ok / rows |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['scenario']} | {r['workers']} | {r['limit']} | {r['rate_limit']} "
            f"| {'yes' if r['headers'] else 'no'} "
            f"| {r['utilisation']:.2f} | {r['share_429']:.1%} | {r['worst_5s']:.2f} | {r['ok']} / {r['rows']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", help=f"comma-separated, from {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--window", type=float, default=WINDOW_S, help="seconds of sending per scenario")
    parser.add_argument("--smoke", action="store_true", help="two tiny scenarios, for CI")
    parser.add_argument("--json", help="where to write the results (default bench/results/quota-<time>.json)")
    args = parser.parse_args(argv)
    names = list(SMOKE) if args.smoke else (args.scenarios.split(",") if args.scenarios else list(SCENARIOS))
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
    window = 3.0 if args.smoke else args.window
    results = []
    with tempfile.TemporaryDirectory() as tmp, ServerProcess() as server:
        work = Path(tmp)
        redis = Redis(work)
        try:
            for name in names:
                results.append(run_scenario(name, SCENARIOS[name], server, redis.url, work, window))
                print(json.dumps(results[-1]), file=sys.stderr)
        finally:
            redis.stop()
    report = {"window_s": window, "latency_ms": LATENCY_MS, "parallelism": PARALLELISM, "results": results}
    path = (
        Path(args.json)
        if args.json
        else PROJECT_ROOT / "bench" / "results" / f"quota-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
