"""Batch mode end to end: the CLI in-process on Beam's local runner, HTTP to the test server's Batch API.

The test server answers batch lines with the same reply logic as its chat endpoint, so a
batch run's per-row scores must equal an online run's, with no chat request sent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from beameval.testserver.harness import PROJECT_ROOT, ServerProcess
from tests.pipeline.test_runners import grpc_binds, job_service  # noqa: F401 - fixtures: Beam's job service on loopback

ROWS = 1000
# Every third row's reference differs from the echoed prompt: exact-match is 0 there, 1 elsewhere.
DATA = [
    {"question": f"question number {i}", "answer": f"question number {i}" if i % 3 else "other"} for i in range(ROWS)
]


def config_for(path: Path, server: ServerProcess, mode: str = "batch", **batch: Any) -> dict[str, Any]:
    model: dict[str, Any] = {"url": server.base_url, "name": "test-model", "format": "openai", "mode": mode}
    if mode == "batch":
        model["batch"] = {"max_requests": 300, "poll_interval": 0.2, **batch}
    return {
        "dataset": {"path": str(path)},
        "target": {"model": model},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 8, "max_retries": 2, "ignore_request_failure": True},
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}"},
            {"type": "f1", "reference": "{{ item.answer }}"},
        ],
    }


def scores_by_row(rows: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    return {r["row_index"]: (r["status"], r["output_text"], r["exact-match.exact-match"], r["f1.f1"]) for r in rows}


def test_batch_run_equals_online_run_and_sends_no_chat_request(batch_server, write_jsonl, run_eval):
    path = write_jsonl(DATA)
    batched = run_eval(config_for(path, batch_server))
    assert batched.code == 0, batched.stderr
    stats = batch_server.stats()
    assert stats["requests"] == 0  # not one direct completion call
    state = batch_server.batches()
    assert [len(b["custom_ids"]) for b in state["batches"]] == [300, 300, 300, 100]
    assert state["lines_answered"] == ROWS
    results = batched.results
    assert results["counts"] == {"rows": ROWS, "ok": ROWS, "errors": 0}
    assert results["usage"]["batch"]["batches"] == 4
    assert results["usage"]["batch"]["requests"] == ROWS
    assert results["usage"]["batch"]["resubmitted"] == 0
    online = run_eval(config_for(path, batch_server, mode="online"))
    assert online.code == 0, online.stderr
    assert batch_server.stats()["requests"] == ROWS
    assert scores_by_row(batched.rows) == scores_by_row(online.rows)
    assert batched.score("exact-match.exact-match")["mean"] == pytest.approx(
        sum(1 for i in range(ROWS) if i % 3) / ROWS
    )


SMALL = 200  # rows of the life-cycle and failure tests: 4 batches of 50
SMALL_DATA = [{"question": f"question {i} please", "answer": f"question {i} please"} for i in range(SMALL)]


def small_config(path: Path, server: ServerProcess, **batch: Any) -> dict[str, Any]:
    return config_for(path, server, **{"max_requests": 50, **batch})


def custom_ids_by_batch(server: ServerProcess) -> list[list[str]]:
    return [b["custom_ids"] for b in server.batches()["batches"]]


def assert_no_request_in_two_batches(server: ServerProcess) -> None:
    """No request is in two live or completed batches (a failed, expired or cancelled one is sent again)."""
    ended = ("failed", "expired", "cancelled")
    seen = [cid for b in server.batches()["batches"] if b["status"] not in ended for cid in b["custom_ids"]]
    assert len(seen) == len(set(seen)), "a request was put into two batches"


def assert_complete(result, rows: int = SMALL) -> None:
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": rows, "ok": rows, "errors": 0}
    assert [r["row_index"] for r in result.rows] == list(range(rows))
    assert all(r["exact-match.exact-match"] == 1.0 for r in result.rows)


def test_wait_false_exits_75_then_resume_collects(batch_server, write_jsonl, run_eval, tmp_path):
    batch_server.batches(completion_s=600.0)  # running until the test lets them finish
    path = write_jsonl(SMALL_DATA)
    out = tmp_path / "nightly"
    submitted = run_eval(small_config(path, batch_server, wait=False), output=out)
    assert submitted.code == 75, submitted.stderr
    assert "--resume" in submitted.stderr and "Traceback" not in submitted.stderr
    assert not (out / "results.json").exists() and not (out / "rows").exists()
    assert batch_server.batches()["batches_created"] == 4
    still = run_eval(small_config(path, batch_server, wait=False), "--resume", output=out)
    assert still.code == 75, still.stderr
    assert batch_server.batches()["batches_created"] == 4  # attached, nothing new submitted
    assert not (out / "results.json").exists()
    assert {b["status"] for b in batch_server.batches()["batches"]} == {"in_progress"}
    batch_server.batches(completion_s=0.0)  # the provider finishes them (at their next poll)
    done = run_eval(small_config(path, batch_server, wait=False), "--resume", output=out)
    assert_complete(done)
    assert batch_server.batches()["batches_created"] == 4
    # The test server counts words as tokens: "question N please" is 3, and its echo too.
    expected = {"batches": 4, "requests": SMALL, "resubmitted": 0, "prompt_tokens": 3 * SMALL}
    assert done.results["usage"]["batch"] == {**expected, "completion_tokens": 3 * SMALL, "ignored_lines": 0}
    assert batch_server.stats()["requests"] == 0
    assert_no_request_in_two_batches(batch_server)


def test_retryable_lines_are_resubmitted_and_400_lines_fail(batch_server, write_jsonl, run_eval):
    batch_server.configure(
        rules=[
            {"match": "question 5 please", "status": 429, "fail_times": 1},
            {"match": "question 6 please", "status": 500, "fail_times": 2},
            {"match": "question 7 please", "status": 400},
        ]
    )
    result = run_eval(small_config(write_jsonl(SMALL_DATA), batch_server))
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": SMALL, "ok": SMALL - 1, "errors": 1}
    rows = {r["row_index"]: r for r in result.rows}
    assert rows[5]["status"] == rows[6]["status"] == "ok"
    assert rows[7]["status"] == "error" and "HTTP 400" in rows[7]["error"]
    [error] = result.errors
    assert error["row_index"] == 7 and error["phase"] == "sample_generation" and "HTTP 400" in error["error"]
    # 4 first batches, one with rows 5 and 6 again, one with row 6 a third time.
    assert result.results["usage"]["batch"]["batches"] == 6
    assert result.results["usage"]["batch"]["resubmitted"] == 3
    assert [len(ids) for ids in custom_ids_by_batch(batch_server)] == [50, 50, 50, 50, 2, 1]


@pytest.mark.parametrize("outcome", ["expired", "cancelled", "failed"])
def test_a_batch_that_ends_without_answers_is_resubmitted(outcome, batch_server, write_jsonl, run_eval):
    batch_server.batches(outcomes=[outcome])  # the first batch created ends this way
    result = run_eval(small_config(write_jsonl(SMALL_DATA), batch_server))
    assert_complete(result)
    assert result.results["usage"]["batch"]["batches"] == 5
    assert result.results["usage"]["batch"]["resubmitted"] == 50
    batches = batch_server.batches()["batches"]
    assert batches[0]["status"] == outcome and all(b["status"] == "completed" for b in batches[1:])
    assert sorted(batches[4]["custom_ids"]) == sorted(batches[0]["custom_ids"])


def start_cli(config: dict[str, Any], output: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """The CLI as a subprocess in its own process group, so kill -9 reaches every process of the run."""
    config_path = tmp_path / "killed.yaml"
    config_path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "pipeline.run", "--config", str(config_path), "--output", str(output)]
    return subprocess.Popen(
        [*command, "--progress_interval", "0"],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def kill_after_first_batch(config: dict[str, Any], output: Path, tmp_path: Path, server: ServerProcess) -> int:
    """Run the CLI, kill -9 its whole process group once the server has a batch; return the batches it had."""
    process = start_cli(config, output, tmp_path)
    deadline = time.monotonic() + 120
    while server.batches()["batches_created"] < 1:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no batch was ever created"
        time.sleep(0.005)  # polling a real subprocess: there is no clock to inject
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    return int(server.batches()["batches_created"])


def test_kill_9_after_the_first_batch_then_resume_attaches(batch_server, write_jsonl, run_eval, tmp_path):
    # 20 batches to submit, each an upload and a create: the kill lands after the first and before the last
    # (the batches themselves would take 600 s).
    batch_server.batches(completion_s=600.0)
    path = write_jsonl(SMALL_DATA)
    out = tmp_path / "killed"
    config = small_config(path, batch_server, max_requests=10)
    created_before = kill_after_first_batch(config, out, tmp_path, batch_server)
    assert 1 <= created_before < SMALL // 10, created_before  # killed between the first batch and the last
    batch_server.batches(completion_s=0.0)
    resumed = run_eval(config, "--resume", output=out)
    assert_complete(resumed)
    assert batch_server.batches()["batches_created"] == SMALL // 10  # what a clean run creates
    assert resumed.results["usage"]["batch"]["batches"] == SMALL // 10
    assert resumed.results["usage"]["batch"]["resubmitted"] == 0
    assert_no_request_in_two_batches(batch_server)
    assert batch_server.stats()["requests"] == 0


def test_two_local_processes_give_the_same_outcomes(batch_server, write_jsonl, run_eval):
    batch_server.batches(outcomes=["expired"])
    batch_server.configure(rules=[{"match": "question 7 please", "status": 400}])
    config = small_config(write_jsonl(SMALL_DATA), batch_server)
    multi = run_eval(config, "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert multi.code == 0, multi.stderr
    assert multi.results["counts"] == {"rows": SMALL, "ok": SMALL - 1, "errors": 1}
    assert multi.results["usage"]["batch"]["batches"] == 5
    assert_no_request_in_two_batches(batch_server)
    assert batch_server.stats()["requests"] == 0


def test_portable_runner_gives_the_same_outcomes(batch_server, write_jsonl, run_eval, job_service):  # noqa: F811
    batch_server.batches(outcomes=["cancelled"])
    config = small_config(write_jsonl(SMALL_DATA), batch_server)
    portable = run_eval(
        config, "--runner=PortableRunner", f"--job_endpoint={job_service}", "--environment_type=LOOPBACK"
    )
    assert_complete(portable)
    assert portable.results["run"]["runner"] == "PortableRunner"
    assert portable.results["usage"]["batch"]["batches"] == 5
    assert_no_request_in_two_batches(batch_server)


def test_batch_tokens_are_priced_at_the_discount_and_the_report_shows_mode_and_saving(
    batch_server, write_jsonl, run_eval
):
    config = config_for(write_jsonl(SMALL_DATA), batch_server, max_requests=50)
    config["target"]["model"]["pricing"] = {"input_per_million": 2.0, "output_per_million": 8.0, "batch_discount": 0.5}
    done = run_eval(config)
    assert done.code == 0, done.stderr
    usage = done.results["usage"]
    prompt, completion = usage["batch"]["prompt_tokens"], usage["batch"]["completion_tokens"]
    assert prompt > 0 and completion > 0
    full = (prompt * 2.0 + completion * 8.0) / 1e6
    assert usage["cost_usd"]["endpoints"]["target"] == pytest.approx(full / 2, abs=1e-6)
    assert usage["cost_usd"]["total"] == pytest.approx(full / 2, abs=1e-6)
    assert usage["cost_usd"]["batch_saving_usd"] == pytest.approx(full / 2, abs=1e-6)
    page = (done.output / "report.html").read_text()
    assert "batch (4 batches, 200 requests, 0 resubmitted)" in page
    assert f"${full / 2:,.4f}" in page and "saved by batch mode" in page
