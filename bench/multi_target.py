"""Several targets in one run against one run per target: wall time and requests.

Three instances of the project's test server (each one target, ``--latency-ms`` per reply)
answer the same N rows. Side 1 is one ``python -m pipeline.run`` with ``targets:`` listing
the three; side 2 is three ``python -m pipeline.run`` commands, one per target (the same
config with ``target:``). Both are whole processes, timed from outside. The table gives
each side's wall time, the requests each server received (N per server on both sides:
nothing is sent twice) and the ratio of the walls.

Usage::

    python bench/multi_target.py --rows 1000 --latency-ms 20
    python bench/multi_target.py --smoke      # 60 rows, for CI

Prints a markdown table and writes JSON to ``bench/results/multi_target-<time>.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from beameval.testserver.harness import ServerProcess  # noqa: E402
from bench.sides import our_env  # noqa: E402  (needs the project root on sys.path)

NAMES = ("model-a", "model-b", "model-c")


def config(data: Path, parallelism: int) -> dict[str, Any]:
    return {
        "dataset": {"path": str(data)},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": parallelism, "max_retries": 1},
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}"},
            {"type": "f1", "reference": "{{ item.answer }}"},
        ],
    }


def timed_run(config_data: dict[str, Any], work: Path, name: str) -> float:
    """One ``python -m pipeline.run`` subprocess; its wall time in seconds."""
    import yaml

    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config_data))
    cmd = [sys.executable, "-m", "pipeline.run", "--config", str(path), "--output", str(work / f"out-{name}")]
    started = time.perf_counter()
    done = subprocess.run(
        [*cmd, "--progress_interval", "0"], cwd=PROJECT_ROOT, env=our_env(), capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall


def measure(rows: int, latency_ms: float, parallelism: int, work: Path) -> dict[str, Any]:
    data = work / "data.jsonl"
    # Every third answer differs from the echoed question, so exact-match is about 2/3 for every target.
    data.write_text(
        "".join(json.dumps({"question": f"q {i}", "answer": f"q {i}" if i % 3 else "x"}) + "\n" for i in range(rows))
    )
    servers = {name: ServerProcess(latency_ms=latency_ms) for name in NAMES}
    try:
        for server in servers.values():
            server.start()
        models = {name: {"url": s.base_url, "name": name, "format": "openai"} for name, s in servers.items()}
        base = config(data, parallelism)
        multi_wall = timed_run({**base, "targets": [{"name": n, "model": m} for n, m in models.items()]}, work, "multi")
        multi_requests = {name: s.stats()["requests"] for name, s in servers.items()}
        for server in servers.values():
            server.reset()
        single_walls = {name: timed_run({**base, "target": {"model": m}}, work, name) for name, m in models.items()}
        single_requests = {name: s.stats()["requests"] for name, s in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    separate = sum(single_walls.values())
    return {
        "rows": rows,
        "targets": len(NAMES),
        "latency_ms": latency_ms,
        "parallelism": parallelism,
        "one_run_wall_s": round(multi_wall, 3),
        "separate_runs_wall_s": round(separate, 3),
        "separate_walls_s": {name: round(wall, 3) for name, wall in single_walls.items()},
        "ratio": round(multi_wall / separate, 2),
        "one_run_requests": multi_requests,
        "separate_runs_requests": single_requests,
    }


def table(report: dict[str, Any]) -> str:
    lines = [
        f"{report['targets']} targets x {report['rows']:,} rows, {report['latency_ms']:g} ms per reply, "
        f"parallelism {report['parallelism']} per target",
        "",
        "| side | wall (s) | requests per server |",
        "|---|---:|---|",
        f"| one run, targets: | {report['one_run_wall_s']:.1f} | {sorted(report['one_run_requests'].values())} |",
        f"| three runs | {report['separate_runs_wall_s']:.1f} | {sorted(report['separate_runs_requests'].values())} |",
        f"| ratio (one / three) | {report['ratio']:.2f} | |",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--parallelism", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="60 rows, 5 ms: does it run end to end")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows, latency = (60, 5.0) if args.smoke else (args.rows, args.latency_ms)
    with tempfile.TemporaryDirectory(prefix="bench-multi-") as work:
        report = measure(rows, latency, args.parallelism, Path(work))
    print(table(report))
    path = args.json or PROJECT_ROOT / "bench" / "results" / f"multi_target-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
