"""Workers as Flink on Kubernetes runs them: a job service, EXTERNAL environment, two worker-pool processes.

On Kubernetes every Flink TaskManager pod has a Beam worker-pool sidecar
(``python -m apache_beam.runners.worker.worker_pool_main --service_port=50000``) and the
job says ``--environment_type=EXTERNAL --environment_config=localhost:50000``: the same
address reaches a different pool on each pod. Here the job service is Beam's Python one
(the job API Flink's job server speaks too), and two worker-pool processes listen on the
same ``localhost`` port (gRPC sets ``SO_REUSEPORT``, so the kernel hands each new
connection to one of them, as each pod's localhost reaches its own sidecar). Each pool
starts SDK worker processes as ``python -c ...`` from ``PATH``, which must be the
project's interpreter (else the job hangs), and binds to loopback only (run under
``pipeline.loopback``, as the sidecar's command can be).

The evaluation runs online against the test server: the aggregates must equal the
default runner's, and the requests in flight must never exceed ``parallelism`` times
the SDK worker processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from beameval.testserver.harness import PROJECT_ROOT
from tests.pipeline.test_runners import (  # noqa: F401 - fixtures and helpers, reused
    LOOPBACK,
    grpc_binds,
    job_service,
    listening_hosts,
)

PARALLELISM = 4
SDK_WORKERS = 2  # --direct_num_workers: the job service's runner asks the pools for this many workers

# worker_pool_main with its wildcard bind ([::]:PORT) on localhost:PORT (pipeline.loopback).
WORKER_POOL = "\n".join(
    [
        "import logging, signal, sys",
        "from apache_beam.runners.worker import worker_pool_main",
        "from pipeline.loopback import loopback_binds",
        "logging.basicConfig(level=logging.INFO)  # its readiness line is an INFO record",
        "signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))",
        "with loopback_binds():",
        "    worker_pool_main.main(sys.argv)",
    ]
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def worker_pools(tmp_path: Path) -> Iterator[tuple[int, list[Path]]]:
    """Two worker-pool processes on one localhost port; yields the port and each pool's log."""
    port = _free_port()
    env = dict(
        os.environ,
        # The pool runs "python -c ..." for each SDK worker: the project's interpreter must come first.
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        PYTHONPATH=os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
    )
    logs = [tmp_path / f"worker_pool_{i}.log" for i in range(2)]
    procs = []
    try:
        for log in logs:
            with log.open("w") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", WORKER_POOL, f"--service_port={port}"],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=PROJECT_ROOT,
                    )
                )
        deadline = time.monotonic() + 60
        while not all("Started worker pool servicer" in log.read_text() for log in logs):
            dead = [log.read_text() for proc, log in zip(procs, logs, strict=True) if proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"a worker pool did not start: {dead or [log.read_text() for log in logs]}")
            time.sleep(0.1)
        listening = listening_hosts(port)
        assert listening and listening <= LOOPBACK, f"the worker pools listen on {listening}"
        yield port, logs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _started_workers(logs: list[Path]) -> list[int]:
    return [log.read_text().count("Starting worker with command") for log in logs]


def pool_run_config(server: Any, model_target: Any, write_jsonl: Any) -> dict[str, Any]:
    """240 rows at 30 ms a request, ``parallelism`` PARALLELISM: the run both worker-pool tests compare.

    The server echoes the question: exact-match holds where i % 13 == i % 5 (i mod 65 in 0..4).
    """
    server.configure(latency_ms=30)
    rows = [{"question": f"answer {i % 13}", "answer": f"answer {i % 5}"} for i in range(240)]
    return {
        "dataset": {"path": str(write_jsonl(rows))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": PARALLELISM, "max_retries": 2},
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}"},
            {"type": "f1", "reference": "{{ item.answer }}"},
        ],
    }


@pytest.mark.slow
def test_external_worker_pools_match_the_default_runner_and_bound_in_flight(
    job_service: str,  # noqa: F811 - the fixture imported above
    worker_pools,
    clean_server,
    model_target,
    write_jsonl,
    run_eval,
) -> None:
    port, logs = worker_pools
    config = pool_run_config(clean_server, model_target, write_jsonl)
    default = run_eval(config)
    assert default.code == 0, default.stderr
    em = default.score("exact-match.exact-match")
    # The server echoes the question: a match where i % 13 == i % 5, i.e. i mod 65 in 0..4.
    assert (em["count"], em["sum"]) == (240, float(sum(1 for i in range(240) if i % 13 == i % 5)))

    clean_server.reset()  # fresh stats: peak_in_flight counts the portable run only
    portable = run_eval(
        config,
        "--runner=PortableRunner",
        f"--job_endpoint={job_service}",
        "--environment_type=EXTERNAL",
        f"--environment_config=localhost:{port}",
        f"--direct_num_workers={SDK_WORKERS}",
    )
    assert portable.code == 0, portable.stderr
    assert portable.results["run"]["runner"] == "PortableRunner"
    assert portable.results["counts"] == default.results["counts"] == {"rows": 240, "ok": 240, "errors": 0}
    assert portable.results["aggregate_scores"] == default.results["aggregate_scores"]
    assert [r["output_text"] for r in portable.rows] == [r["output_text"] for r in default.rows]
    assert len(list((portable.output / "rows").glob("*.parquet"))) >= SDK_WORKERS  # each worker wrote its shard
    started = _started_workers(logs)
    assert sum(started) == SDK_WORKERS, started  # the pools, not this process, ran the workers
    stats = clean_server.stats()
    assert stats["requests"] == 240
    assert 1 <= stats["peak_in_flight"] <= PARALLELISM * SDK_WORKERS, stats["peak_in_flight"]
    print(f"worker pools started {started} SDK workers; peak in flight {stats['peak_in_flight']}")
