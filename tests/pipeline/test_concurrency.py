"""Two runs on one OUT_DIR, a run killed and resumed, a store compacted while runs use it: real processes throughout.

The first run is a CLI subprocess talking to the project's test server (slowed down so it
is still running when the second one starts); the second runs in-process.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import pytest

from beameval.outputs.lock import LOCK_FILE
from pipeline.cache import main as cache_main
from tests.pipeline.test_resume_pipeline import DATA, config_for, interrupt_halfway, start_run

ROWS = len(DATA)


def wait_for_lock(out: Path, pid: int) -> None:
    """Until the subprocess ``pid`` holds OUT_DIR's lock."""
    deadline = time.monotonic() + 120
    while True:
        try:
            if json.loads((out / LOCK_FILE).read_text())["pid"] == pid:
                return
        except (FileNotFoundError, ValueError):
            pass
        assert time.monotonic() < deadline, "the first run never took the lock"
        time.sleep(0.02)  # polling a real subprocess: there is no clock to inject


@pytest.mark.slow
def test_a_second_run_on_a_live_runs_output_is_refused_at_once_and_the_first_completes(
    clean_server, model_target, write_jsonl, run_eval, tmp_path
):
    clean_server.configure(latency_ms=40)
    config = config_for(write_jsonl(DATA), model_target())
    out = tmp_path / "out"
    first = start_run(config, out, tmp_path)
    wait_for_lock(out, first.pid)
    for flags in ((), ("--overwrite",), ("--resume",)):
        started = time.monotonic()
        second = run_eval(config, *flags, output=out)
        assert second.code == 2, second.stderr
        assert f"in use by another run: pid {first.pid} on host {socket.gethostname()}, started 20" in second.stderr
        assert time.monotonic() - started < 30  # refused without waiting for the first run
        assert len(list(out.glob("_staging-*"))) <= 1  # the second run made no staging folder of its own
    assert first.poll() is None, "the first run was still running when the others were refused"
    _, stderr = first.communicate(timeout=240)
    assert first.returncode == 0, stderr
    results = json.loads((out / "results.json").read_text())
    assert results["counts"] == {"rows": ROWS, "ok": ROWS, "errors": 0}
    assert clean_server.stats()["requests"] == ROWS  # the refused runs sent nothing
    assert not (out / LOCK_FILE).exists()


@pytest.mark.slow
def test_a_killed_runs_lock_is_taken_over_by_its_resume_and_said_so(
    clean_server, model_target, write_jsonl, run_eval, tmp_path
):
    clean_server.configure(latency_ms=20)
    config = config_for(write_jsonl(DATA), model_target())
    out = tmp_path / "out"
    process = start_run(config, out, tmp_path)
    interrupt_halfway(clean_server, process, signal.SIGKILL)
    process.communicate(timeout=60)
    assert json.loads((out / LOCK_FILE).read_text())["pid"] == process.pid  # kill -9 left the lock file
    resumed = run_eval(config, "--resume", output=out)
    assert resumed.code == 0, resumed.stderr
    assert f"took over the lock of {str(out)!r} left by a run that is no longer running (pid {process.pid}" in (
        resumed.stderr
    )
    assert resumed.results["counts"]["rows"] == ROWS and not (out / LOCK_FILE).exists()


@pytest.mark.slow
def test_compacting_the_store_again_and_again_during_a_run_loses_no_entry(
    clean_server, model_target, write_jsonl, run_eval, tmp_path, capsys
):
    store = tmp_path / "store"
    half = ROWS // 2
    config = config_for(write_jsonl(DATA), model_target())
    config["cache"] = {"path": str(store)}
    warm = config_for(write_jsonl(DATA[:half], "half.jsonl"), model_target())
    warm["cache"] = {"path": str(store)}
    for part in range(3):  # several shards, so a compaction replaces many with its 16
        part_config = {**warm, "dataset": {"path": str(write_jsonl(DATA[part::3][: half // 3], f"p{part}.jsonl"))}}
        assert run_eval(part_config).code == 0
    stored = {
        json.loads(line)["key"] for path in store.glob("entries/*.jsonl") for line in path.read_text().splitlines()
    }
    clean_server.reset()
    clean_server.configure(latency_ms=20)

    run = start_run(config, tmp_path / "out", tmp_path)
    compactions = 0
    while run.poll() is None:
        assert cache_main(["compact", str(store)]) == 0
        compactions += 1
        time.sleep(0.02)  # polling a real subprocess: there is no clock to inject
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 0, stderr
    assert compactions >= 10, compactions
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["usage"]["cache"] == {"hits": len(stored), "misses": ROWS - len(stored)}
    assert clean_server.stats()["requests"] == ROWS - len(stored)  # every stored entry still answered its row
    capsys.readouterr()
    assert cache_main(["stats", str(store)]) == 0
    assert json.loads(capsys.readouterr().out)["distinct_keys"] == ROWS  # the run's new responses are in too
