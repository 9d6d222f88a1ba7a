"""The evaluator on Prism, Beam's portable runner written in Go: a second, independent engine.

Beam's Python job service runs a submitted pipeline with the same FnApiRunner as the
default local runner, so it cannot catch a portability bug the local runner hides. Prism
is a separate implementation of Beam's execution semantics (fusion, bundling, shuffles,
side inputs, worker management), in Go. Here it runs as a job server in its own process
that outlives each client, the shape of submitting to a Flink job server:

- the QA example offline and online: every statistic in ``results.json`` and every row in
  ``rows/`` equal to the local runner's (offline also through ``--runner=PrismRunner``);
- EXTERNAL worker pools (the Kubernetes sidecar shape): each prompt sent once, and the
  peak in flight within ``parallelism`` times the SDK workers the pools started;
- the client killed with SIGKILL mid-run, then ``--resume``: the clean run's outputs, and
  only what the journal did not hold is sent again.

Prism's job port (jobs, artifacts and the workers' FnAPI on one port) listens on every
interface and has no flag to change that: the server gets a port the kernel picks, and is
stopped by its PID at the end of the module. Without a Go toolchain Prism cannot be built
and these tests are skipped.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from beameval.testserver.harness import PROJECT_ROOT, ServerProcess
from tests.conftest import CliResult
from tests.pipeline.test_loopback import listening_sockets
from tests.pipeline.test_resume_pipeline import interrupt_halfway, journaled_keys, start_run
from tests.pipeline.test_runners import LOOPBACK, listening_hosts
from tests.runners.prism_env import BINARY, CACHE, VERSION, ensure, go_toolchain
from tests.scheduling.test_worker_pools import (  # noqa: F401 - the fixture
    PARALLELISM,
    _started_workers,
    pool_run_config,
    worker_pools,
)

# The first test may wait for the Prism build (about 70 s alone, minutes on a loaded machine).
pytestmark = pytest.mark.timeout(900)

#: Row columns and ``usage`` entries that measure time, not behaviour: they differ between any two runs.
TIMING = {"latency_ms"}


@pytest.fixture(scope="module")
def prism_binary() -> Path:
    """The Prism binary for the installed Beam version, built once (``tests/runners/prism_env.py``)."""
    if not os.access(BINARY, os.X_OK) and go_toolchain() is None:
        pytest.skip(
            f"no Go toolchain: Prism v{VERSION} (Beam's portable runner in Go) cannot be built "
            f"(`go install github.com/apache/beam/sdks/v2/go/cmd/prism@v{VERSION}`, or put the binary at {BINARY})"
        )
    binary, _ = ensure(log=Path(f"{CACHE}.build.log"))
    return binary


@pytest.fixture(scope="module")
def prism_server(prism_binary: Path, tmp_path_factory) -> Iterator[tuple[str, int]]:
    """A Prism job server in its own process, on a port the kernel picks; yields ``localhost:PORT`` and its PID."""
    log = tmp_path_factory.mktemp("prism") / "prism.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(prism_binary), "--job_port=0", "--serve_http=false", "--log_kind=text", "--log_level=info"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while not (found := re.search(r"Serving JobManagement.*endpoint=localhost:(\d+)", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Prism did not start: {log.read_text()}")
            time.sleep(0.05)
        port = int(found.group(1))
        # What docs/RUNNERS.md says: every interface, and no flag to change it.
        assert listening_hosts(port) <= {"::", "0.0.0.0"}, listening_hosts(port)
        yield f"localhost:{port}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def prism(prism_server: tuple[str, int]) -> str:
    """The module's Prism job server endpoint."""
    return prism_server[0]


def on_prism(endpoint: str, *extra: str) -> list[str]:
    return ["--runner=PortableRunner", f"--job_endpoint={endpoint}", *(extra or ["--environment_type=LOOPBACK"])]


def example(name: str, **replace: Any) -> dict[str, Any]:
    """``examples/NAME.yaml`` with its dataset path made absolute; ``replace`` sets top-level keys."""
    config = yaml.safe_load((PROJECT_ROOT / "examples" / f"{name}.yaml").read_text())
    config["dataset"]["path"] = str(PROJECT_ROOT / config["dataset"]["path"])
    return {**config, **replace}


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    return bool(got == want)


def assert_same_outputs(got: CliResult, want: CliResult) -> None:
    """Every statistic of ``results.json`` and every row of ``rows/`` equal, timings aside."""
    assert got.code == 0, got.stderr
    for key in ("status", "complete", "counts", "aggregate_scores", "warnings"):
        assert got.results[key] == want.results[key], key
    path = {"errors_path": None}  # each run's own OUT_DIR
    assert {**got.results["failures"], **path} == {**want.results["failures"], **path}
    timing = {key: None for key in TIMING}
    assert {**got.results["usage"], **timing} == {**want.results["usage"], **timing}
    assert got.results["run"]["counters"] == want.results["run"]["counters"]
    rows, expected = got.rows, want.rows
    assert [r["row_index"] for r in rows] == [r["row_index"] for r in expected] and rows
    for row, other in zip(rows, expected, strict=True):
        assert row.keys() == other.keys()
        different = [k for k in other if k not in TIMING and not _same(row[k], other[k])]
        assert not different, (row["row_index"], {k: (row[k], other[k]) for k in different})
    assert got.errors == want.errors


def _session(sid: int) -> list[int]:
    """The processes of session ``sid`` (a client started in its own session, and what it left behind)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3]) == sid:
                found.append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_offline_qa_example_on_prism_equals_the_local_runner(
    prism: str, prism_binary: Path, run_eval, tmp_path: Path
) -> None:
    config = example("offline")
    local = run_eval(config)
    assert local.code == 0, local.stderr
    assert local.results["counts"]["rows"] == 40
    portable = run_eval(config, *on_prism(prism))
    assert portable.results["run"]["runner"] == "PortableRunner"
    assert_same_outputs(portable, local)
    # Beam's own launcher for Prism starts the given binary and stops it when the client exits: a subprocess
    # here, so that Prism's wildcard port does not stay open for the rest of the session. Meanwhile the
    # sockets its processes listen on are watched: Prism's own on every interface (no flag changes it),
    # the client's LOOPBACK worker pool on loopback only.
    output = tmp_path / "prism-runner"
    flags = ["--runner=PrismRunner", f"--prism_location={prism_binary}"]
    client = start_run(config, output, tmp_path, *flags)
    seen: dict[bool, set[tuple[str, int]]] = {True: set(), False: set()}  # is it Prism's? -> (host, port)
    deadline = time.monotonic() + 240
    while client.poll() is None and time.monotonic() < deadline:
        for pid in _session(client.pid):
            seen[_command(pid).startswith(str(prism_binary))] |= listening_sockets({pid})
        time.sleep(0.2)
    stdout, stderr = client.communicate(timeout=10)
    launched = CliResult(client.returncode, stdout, stderr, output)
    assert launched.results["run"]["runner"] == "PrismRunner"
    assert_same_outputs(launched, local)
    assert seen[False] and {host for host, _ in seen[False]} <= LOOPBACK, seen[False]
    assert seen[True] and {host for host, _ in seen[True]} <= {"::", "0.0.0.0"}, seen[True]
    left = [pid for pid in _session(client.pid) if _command(pid).startswith(str(prism_binary))]
    assert not left, "the Prism that PrismRunner started outlived its client"


@pytest.fixture(scope="module")
def qa_server() -> Iterator[ServerProcess]:
    """The test server answering the QA set as ``run_local.sh`` starts it (some answers right, some wrong)."""
    with ServerProcess(answers=PROJECT_ROOT / "data" / "sample_model_answers.jsonl", latency_ms=20) as server:
        yield server


def test_online_qa_example_on_prism_equals_the_local_runner(prism: str, qa_server: ServerProcess, run_eval) -> None:
    target = {"model": {"url": qa_server.base_url, "name": "local-test-model", "format": "openai"}}
    config = example("local_qa", target=target)
    qa_server.reset()
    local = run_eval(config)
    assert local.code == 0, local.stderr
    assert qa_server.stats()["requests"] == 40
    em = local.score("exact-match.exact-match")
    assert 0 < em["sum"] < 40  # the seeded answers are a mix, so equality below means something
    qa_server.reset()
    portable = run_eval(config, *on_prism(prism))
    assert_same_outputs(portable, local)
    stats = qa_server.stats()
    assert stats["requests"] == 40 and set(stats["per_prompt"].values()) == {1}


@pytest.mark.slow
def test_external_worker_pools_on_prism_send_each_prompt_once_within_the_bound(
    prism: str,
    worker_pools,  # noqa: F811 - the fixture imported above
    clean_server,
    model_target,
    write_jsonl,
    run_eval,
) -> None:
    port, logs = worker_pools
    config = pool_run_config(clean_server, model_target, write_jsonl)
    local = run_eval(config)
    assert local.code == 0, local.stderr
    clean_server.reset()  # fresh stats: the Prism run's requests only
    portable = run_eval(
        config,
        *on_prism(prism, "--environment_type=EXTERNAL", f"--environment_config=localhost:{port}"),
    )
    assert_same_outputs(portable, local)
    started = sum(_started_workers(logs))
    assert started >= 1, "the pools, not this process, ran the SDK workers"
    stats = clean_server.stats()
    assert stats["requests"] == stats["by_status"]["200"] == 240  # one answered request per row: none sent twice
    assert 1 <= stats["peak_in_flight"] <= PARALLELISM * started, (stats["peak_in_flight"], started)
    print(f"\nPrism EXTERNAL: {started} SDK workers started by the pools; peak in flight {stats['peak_in_flight']}")


KILLED_ROWS = 600


@pytest.mark.slow
def test_a_client_killed_mid_run_on_prism_resumes_to_the_clean_result(
    prism: str, clean_server, model_target, write_jsonl, run_eval, tmp_path
) -> None:
    rows = [
        {"question": f"question number {i}", "answer": f"question number {i}" if i % 3 else "x"} for i in range(600)
    ]
    config = {
        "dataset": {"path": str(write_jsonl(rows))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": PARALLELISM, "max_retries": 1},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    clean = run_eval(config)
    assert clean.code == 0, clean.stderr
    clean_server.reset()
    clean_server.configure(latency_ms=20)
    output = tmp_path / "killed"
    process = start_run(config, output, tmp_path, *on_prism(prism))
    at_kill = interrupt_halfway(clean_server, process, signal.SIGKILL)  # the client's whole process group
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    first_sent = clean_server.stats()["requests"]  # the orphaned job's workers died with the client
    recorded = journaled_keys(output)

    clean_server.reset()
    resumed = run_eval(config, "--resume", *on_prism(prism), output=output)
    assert resumed.code == 0, resumed.stderr
    sent = clean_server.stats()["requests"]
    print(f"\nPrism kill -9: answered {at_kill['by_status']['200']}, sent {first_sent}, journaled {len(recorded)}, ")
    print(f"resume sent {sent}; {first_sent + sent} requests for {KILLED_ROWS} rows")
    assert sent == KILLED_ROWS - len(recorded)  # every journaled answer reused, everything else sent once
    assert set(clean_server.stats()["per_prompt"].values()) <= {1}
    assert first_sent + sent <= KILLED_ROWS + PARALLELISM + PARALLELISM * 1000 // 20  # in flight + a second unflushed
    assert resumed.results["counts"] == clean.results["counts"]
    assert resumed.results["aggregate_scores"] == clean.results["aggregate_scores"]
    key = ("row_index", "status", "item", "output_text", "exact-match.exact-match")
    assert [tuple(r[k] for k in key) for r in resumed.rows] == [tuple(r[k] for k in key) for r in clean.rows]
    assert resumed.results["usage"]["cache"] == {"hits": len(recorded), "misses": sent}
