"""The same evaluation on other runners: PortableRunner, local multi-processing, Dataflow dry run.

Each non-default runner must give exactly the default runner's results. Beam's gRPC
servers (job service, LOOPBACK worker pool, the runner's control/data/state/logging
servers) bind to every interface (``[::]``) by default; the evaluator binds the ones it
opens to loopback (``pipeline.loopback``), which the tests check here without patching
anything in this process. The job-service subprocess, which stands in for a cluster's job
server, runs under ``pipeline.loopback`` as a user would run it.
"""

from __future__ import annotations

import inspect
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from beameval.testserver.harness import PROJECT_ROOT


def honour_num_workers(run_via_runner_api):
    """Make the job service's FnApiRunner start ``--direct_num_workers`` SDK workers, as Flink's parallelism would.

    Beam's Python job service calls ``run_via_runner_api`` directly, which always uses one
    worker; a job that sets no ``--direct_num_workers`` is unaffected.
    """

    def run(self, proto, options):
        from apache_beam.options.pipeline_options import DirectOptions

        workers = options.view_as(DirectOptions).direct_num_workers  # a string once it crossed the job API
        self._num_workers = int(workers) if workers else self._num_workers
        return run_via_runner_api(self, proto, options)

    return run


# The job service: Beam's local_job_service_main with loopback-only binds (python -m pipeline.loopback).
JOB_SERVICE = "\n".join(
    [
        "import signal, sys",
        "from apache_beam.runners.portability import local_job_service_main",
        "from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner",
        "from pipeline.loopback import loopback_binds",
        inspect.getsource(honour_num_workers),
        "FnApiRunner.run_via_runner_api = honour_num_workers(FnApiRunner.run_via_runner_api)",
        "signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))",
        "with loopback_binds():",
        "    local_job_service_main.run(sys.argv[1:])",
    ]
)


@pytest.fixture(autouse=True)
def grpc_binds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The addresses every gRPC server this process starts in a test binds, as gRPC receives them (unchanged)."""
    import grpc._server

    bound: list[str] = []
    add_insecure_port = grpc._server._Server.add_insecure_port

    def add(self, address):
        bound.append(address)
        return add_insecure_port(self, address)

    monkeypatch.setattr(grpc._server._Server, "add_insecure_port", add)
    return bound


@pytest.fixture
def job_service(tmp_path: Path) -> Iterator[str]:
    """Beam's Python job service on localhost in a subprocess; yields its endpoint, stops it after."""
    port_file = tmp_path / "job_service.port"
    log = (tmp_path / "job_service.log").open("w")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])))
    args = ["--port", "0", "--port_file", str(port_file), "--staging_dir", str(tmp_path / "staging")]
    proc = subprocess.Popen(
        [sys.executable, "-c", JOB_SERVICE, *args], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=PROJECT_ROOT
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"job service did not start: {(tmp_path / 'job_service.log').read_text()}")
            time.sleep(0.05)
        port = int(port_file.read_text())
        listening = listening_hosts(port)
        assert listening and listening <= LOOPBACK, f"the job service listens on {listening}"
        yield f"localhost:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def listening_hosts(port: int) -> set[str]:
    """The local addresses with a TCP socket listening on ``port`` (Linux /proc/net)."""
    hosts = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        if not os.path.exists(table):
            continue
        with open(table) as handle:
            next(handle)
            for line in handle:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                    continue
                raw = bytes.fromhex(address)
                # /proc/net prints each 32-bit word in host (little-endian) order.
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                hosts.add(socket.inet_ntop(family, raw))
    return hosts


def dataset_rows(n: int = 240) -> list[dict[str, object]]:
    return [
        {"q": f"question {i}", "answer": f"answer {i % 11}", "output": f"answer {i % 7}" if i % 3 else "no idea"}
        for i in range(n)
    ]


def config_for(path: Path) -> dict[str, object]:
    return {
        "dataset": {"path": str(path)},
        "params": {"ignore_request_failure": True},
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
            {"type": "f1", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
            {"type": "bleu", "references": ["{{ item.answer }}"], "candidate": "{{ item.output }}"},
        ],
    }


@pytest.fixture
def dataset(write_parquet, tmp_path: Path) -> Path:
    rows = dataset_rows()
    # Several files and row groups, so the read is split and shuffled on every runner.
    write_parquet(rows[:100], "part-0.parquet", row_group_size=32)
    write_parquet(rows[100:], "part-1.parquet", row_group_size=50)
    return tmp_path / "part-*.parquet"


def _assert_same_rows(actual: list[dict[str, object]], expected: list[dict[str, object]]) -> None:
    assert len(actual) == len(expected) == 240
    for got, want in zip(actual, expected, strict=True):
        assert got.keys() == want.keys()
        for key, value in want.items():
            if isinstance(value, float) and math.isnan(value):
                assert math.isnan(got[key]), (key, got)
            else:
                assert got[key] == value, (key, got, want)


def _check_default(result) -> None:
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 240, "ok": 240, "errors": 0}
    em = result.score("exact-match.exact-match")
    expected_matches = sum(1 for i in range(240) if i % 3 and i % 7 == i % 11)
    assert (em["count"], em["nan_count"], em["sum"]) == (240, 0, float(expected_matches))
    assert result.score("bleu.corpus")["count"] == 1
    assert [r["row_index"] for r in result.rows] == list(range(240))


def test_portable_runner_matches_default_runner(dataset: Path, run_eval, job_service: str, grpc_binds) -> None:
    config = config_for(dataset)
    default = run_eval(config)
    _check_default(default)
    portable = run_eval(
        config, "--runner=PortableRunner", f"--job_endpoint={job_service}", "--environment_type=LOOPBACK"
    )
    assert portable.code == 0, portable.stderr
    assert portable.results["run"]["runner"] == "PortableRunner"
    assert portable.results["counts"] == default.results["counts"]
    assert portable.results["aggregate_scores"] == default.results["aggregate_scores"]
    _assert_same_rows(portable.rows, default.rows)
    assert portable.errors == default.errors == []
    # The LOOPBACK worker pool started in this process bound to loopback only.
    assert grpc_binds and all(bind.startswith("localhost:") for bind in grpc_binds), grpc_binds


def test_multi_processing_matches_default_runner(dataset: Path, run_eval, grpc_binds) -> None:
    config = config_for(dataset)
    default = run_eval(config)
    _check_default(default)
    multi = run_eval(config, "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert multi.code == 0, multi.stderr
    assert multi.results["counts"] == default.results["counts"]
    assert multi.results["aggregate_scores"] == default.results["aggregate_scores"]
    _assert_same_rows(multi.rows, default.rows)
    # Two workers really ran: each writes its own rows/ shard.
    assert len(list((multi.output / "rows").glob("*.parquet"))) >= 2
    # The runner's control/data/state/logging servers for the worker processes bound to loopback only.
    assert grpc_binds and all(bind.startswith("localhost:") for bind in grpc_binds), grpc_binds


#: Flags that build a Dataflow job offline without submitting it (no project or bucket is contacted).
DATAFLOW_DRY_RUN = [
    "--runner=DataflowRunner",
    "--dry_run=True",
    "--project=my-project",
    "--region=us-central1",
    "--temp_location=gs://my-bucket/tmp",
    f"--setup_file={PROJECT_ROOT / 'setup.py'}",
]


def test_dataflow_dry_run_builds_the_job_offline(dataset: Path, run_eval) -> None:
    try:
        from apache_beam.runners.dataflow.internal import apiclient  # noqa: F401 - needs the [gcp] extra
    except ImportError:
        pytest.fail("the Dataflow dry run needs the [gcp] extra: pip install '.[test,gcp]'")
    result = run_eval(
        config_for(dataset),
        *DATAFLOW_DRY_RUN,
    )
    assert result.code == 0, result.stderr
    assert "dry run" in result.stdout and "DataflowRunner" in result.stdout
    assert not result.output.exists() or not any(result.output.iterdir()), "a dry run writes no outputs"
