"""Runner benchmark: rows/s on Prism and on Beam's Python job service, as ratios to the default local runner.

The same config runs as ``python -m pipeline.run`` subprocesses on three runners:

- ``local``: no ``--runner``, Beam's FnApiRunner in the driver (the default);
- ``prism``: ``--runner=PortableRunner --environment_type=LOOPBACK`` against a Prism job
  server (Beam's portable runner in Go, ``tests/runners/prism_env.py`` builds it) started
  once for the benchmark, as a Flink job server would be;
- ``python job service``: the same against Beam's ``local_job_service_main`` (run under
  ``pipeline.loopback``), which executes the job with the FnApiRunner again.

Two cases: offline exact-match over 10^5 rows (``bench/scale.py``'s dataset), and online,
2,000 rows against the project's test server at 20 ms a request, ``parallelism: 16``. In
each case the runners take turns ``--repeat`` times; each runner's best rows/s is divided
by the local runner's best from the same run. The three must agree on the exact-match
mean, or the benchmark fails. Rows/s is over the whole command's wall time, start-up and
job submission included, which is what a user waits for; the pipeline's own wall time
(``results.json``'s ``run.wall_time_s``) is printed beside it.

Usage::

    python bench/runners.py                      # 10^5 offline rows, 2,000 online rows at 20 ms
    python bench/runners.py --repeat 3           # best of three turns each
    python bench/runners.py --smoke              # tiny sizes, for CI

Prints a markdown table and writes JSON to ``bench/results/runners-<time>.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.scale import dataset, offline_config, online_config, run_once  # noqa: E402
from bench.sides import our_env  # noqa: E402

LATENCY_MS = 20
PARALLELISM = 16
RUNNERS = ("local", "prism", "python job service")


def _wait_for(what: str, proc: subprocess.Popen[bytes], log: Path, found: Callable[[], str | None]) -> str:
    deadline = time.monotonic() + 60
    while (value := found()) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return value


def _load(path: Path) -> Any:
    """A module from its file (``tests`` is not an importable package: site-packages holds another)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def job_servers(work: Path) -> Iterator[dict[str, str]]:
    """A Prism job server and Beam's Python job service, each in its own process; yields their endpoints."""
    prism_env = _load(PROJECT_ROOT / "tests" / "runners" / "prism_env.py")  # the tests' build of Prism, shared
    binary, _ = prism_env.ensure(log=Path(f"{prism_env.CACHE}.build.log"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        prism_log = work / "prism.log"
        with prism_log.open("w") as out:
            procs.append(
                subprocess.Popen(
                    [str(binary), "--job_port=0", "--serve_http=false", "--log_kind=text"], stdout=out, stderr=out
                )
            )

        def prism_port() -> str | None:
            match = re.search(r"Serving JobManagement.*endpoint=localhost:(\d+)", prism_log.read_text())
            return match.group(1) if match else None

        service_log, port_file = work / "job_service.log", work / "job_service.port"
        service = "apache_beam.runners.portability.local_job_service_main"
        with service_log.open("w") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "pipeline.loopback", service, "--port=0", f"--port_file={port_file}"],
                    stdout=out,
                    stderr=out,
                    cwd=PROJECT_ROOT,
                    env=our_env(),
                )
            )

        def service_port() -> str | None:
            return port_file.read_text().strip() or None if port_file.exists() else None

        yield {
            "prism": f"localhost:{_wait_for('Prism', procs[0], prism_log, prism_port)}",
            "python job service": f"localhost:{_wait_for('the job service', procs[1], service_log, service_port)}",
        }
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def runner_flags(runner: str, endpoints: dict[str, str]) -> list[str]:
    if runner == "local":
        return []
    return ["--runner=PortableRunner", f"--job_endpoint={endpoints[runner]}", "--environment_type=LOOPBACK"]


def run_case(
    case: str, config: dict[str, Any], rows: int, endpoints: dict[str, str], work: Path, repeat: int
) -> list[dict[str, Any]]:
    """Every runner on ``config`` in turn, ``repeat`` times; the best of each, with its ratio to local's best."""
    runs: dict[str, list[dict[str, Any]]] = {runner: [] for runner in RUNNERS}
    for attempt in range(repeat):
        for runner in RUNNERS:
            name = f"{case}-{RUNNERS.index(runner)}"
            measured = run_once(config, work, name, ["--progress_interval=0", *runner_flags(runner, endpoints)])
            if measured["rows"] != rows or measured["ok"] != rows:
                raise RuntimeError(f"{case} on {runner}: {measured['ok']} of {measured['rows']} rows ok, not {rows}")
            runs[runner].append(measured)
            print(
                f"{case:<8} {runner:<18} [{attempt + 1}/{repeat}]: {measured['wall_s']:.1f} s, "
                f"{measured['rows_per_s']:,.0f} rows/s",
                file=sys.stderr,
            )
    means = {run["exact_match_mean"] for side in runs.values() for run in side}
    if len(means) != 1:
        raise RuntimeError(f"{case}: the runners disagree on the exact-match mean: {sorted(means)}")
    best = {runner: max(side, key=lambda run: run["rows_per_s"]) for runner, side in runs.items()}
    local = best["local"]["rows_per_s"]
    return [
        {
            **best[runner],
            "case": case,
            "runner": runner,
            "all_rows_per_s": [run["rows_per_s"] for run in runs[runner]],
            "ratio_to_local": round(best[runner]["rows_per_s"] / local, 2),
        }
        for runner in RUNNERS
    ]


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| case | rows | runner | wall s (best) | of which the pipeline s | rows/s (best) | every turn's rows/s "
        "| ratio to local |",
        "|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for r in results:
        turns = ", ".join(f"{rate:,.0f}" for rate in r["all_rows_per_s"])
        lines.append(
            f"| {r['case']} | {r['rows']:,} | {r['runner']} | {r['wall_s']:.1f} | {r['pipeline_wall_s']:.1f} "
            f"| {r['rows_per_s']:,.0f} | {turns} | {r['ratio_to_local']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline-rows", type=int, default=100_000)
    parser.add_argument("--online-rows", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=1, help="turns of each runner per case (the best counts)")
    parser.add_argument("--smoke", action="store_true", help="200 offline and 40 online rows, for CI")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "beam-llm-eval-bench")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON results")
    args = parser.parse_args(argv)
    offline_rows, online_rows = (200, 40) if args.smoke else (args.offline_rows, args.online_rows)

    from beameval.testserver.harness import ServerProcess

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="runners-bench-") as tmp:
        work = Path(tmp)
        with job_servers(work) as endpoints, ServerProcess(latency_ms=LATENCY_MS) as server:
            offline = offline_config(dataset(args.cache, offline_rows))
            results += run_case("offline", offline, offline_rows, endpoints, work, max(args.repeat, 1))
            online = online_config(dataset(args.cache, online_rows), server.base_url, PARALLELISM)
            results += run_case("online", online, online_rows, endpoints, work, max(args.repeat, 1))

    report = {
        "benchmark": "runners",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "online": {"latency_ms": LATENCY_MS, "parallelism": PARALLELISM},
        "smoke": args.smoke,
        "results": results,
    }
    target = args.json or PROJECT_ROOT / "bench" / "results" / f"runners-{time.strftime('%Y%m%d-%H%M%S')}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(results))
    print(f"\nJSON: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
