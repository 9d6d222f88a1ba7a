"""An LLM judge in batch mode, end to end: the CLI on Beam's local runner, HTTP to the test server's Batch API.

The test server answers batch lines with the rules of its chat endpoint, so a judge's batch
answers are the answers online judging gets, and the scores must be equal; the server's
counts say how many judge requests were sent (online, or as batch lines) and in which batches.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from beameval.testserver.harness import ServerProcess
from tests.batch.test_batch_pipeline import assert_no_request_in_two_batches, kill_after_first_batch
from tests.pipeline.test_judge_pipeline import judge_metric
from tests.pipeline.test_runners import grpc_binds, job_service  # noqa: F401 - fixtures: Beam's job service on loopback

ROWS = 12
# The target echoes the question; every third row's reference differs ("other"), and the judge calls those bad.
DATA = [
    {"question": f"question {i} please", "answer": f"question {i} please" if i % 3 else "other"} for i in range(ROWS)
]
JUDGE_RULES = [
    {"match": "JUDGE: question 4 please vs", "reply": '{"quality": "good", "confidence": 9}'},  # out of range: NaN
    {"match": "vs other", "reply": 'Verdict: {"quality": "bad", "confidence": 2}'},
    {"match": "JUDGE:", "reply": '```json\n{"quality": "good", "confidence": 5}\n```'},
]
JUDGE = "llm-judge"
SCORES = [
    "exact-match.exact-match",
    f"{JUDGE}.quality",
    f"{JUDGE}.quality.label",
    f"{JUDGE}.confidence",
    f"{JUDGE}.nan_reason",
]


def judge_config(
    path: Path, server: ServerProcess, judge_mode: str = "batch", target_mode: str = "online", **batch: Any
) -> dict[str, Any]:
    settings = {"max_requests": 5, "poll_interval": 0.2, **batch}
    target: dict[str, Any] = {"url": server.base_url, "name": "test-model", "format": "openai", "mode": target_mode}
    judge_model: dict[str, Any] = {"url": server.base_url, "name": "judge", "format": "openai", "mode": judge_mode}
    for model in (target, judge_model):
        if model["mode"] == "batch":
            model["batch"] = settings
    judge_model["pricing"] = {"input_per_million": 2.0, "output_per_million": 8.0, "batch_discount": 0.5}
    return {
        "dataset": {"path": str(path)},
        "target": {"model": target},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, "max_retries": 2},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}, judge_metric(judge_model)],
    }


@pytest.fixture
def judge_server(clean_server: ServerProcess) -> ServerProcess:
    clean_server.batches(validating_s=0.0, completion_s=0.0, outcomes=[])
    clean_server.configure(rules=JUDGE_RULES)
    return clean_server


def scores_by_row(rows: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """Each row's status, answer and scores; NaN as a string, so two NaNs compare equal."""
    return {
        r["row_index"]: (
            r["status"],
            r["output_text"],
            *(str(r[name]) if r[name] != r[name] else r[name] for name in SCORES),
        )
        for r in rows
    }


def judge_batches(server: ServerProcess) -> list[list[str]]:
    return [b["custom_ids"] for b in server.batches()["batches"] if b["custom_ids"][0].startswith(f"{JUDGE}-")]


def assert_judged(result) -> None:
    """The scores every judged run must have, computed from the rules above."""
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": ROWS, "ok": ROWS, "errors": 0}
    good = [i for i in range(ROWS) if i % 3]
    quality = result.score(f"{JUDGE}.quality")
    assert (quality["count"], quality["nan_count"], quality["mean"]) == (ROWS, 0, len(good) / ROWS)
    confidence = result.score(f"{JUDGE}.confidence")
    expected = [5.0 if i % 3 else 2.0 for i in range(ROWS) if i != 4]
    assert (confidence["count"], confidence["nan_count"], confidence["sum"]) == (ROWS - 1, 1, sum(expected))
    rows = {r["row_index"]: r for r in result.rows}
    assert [rows[i][f"{JUDGE}.quality.label"] for i in range(ROWS)] == ["good" if i % 3 else "bad" for i in range(ROWS)]
    assert math.isnan(rows[4][f"{JUDGE}.confidence"]) and "confidence" in rows[4][f"{JUDGE}.nan_reason"]


def test_judge_in_batch_mode_scores_as_online_judging(judge_server, write_jsonl, run_eval):
    path = write_jsonl(DATA)
    batched = run_eval(judge_config(path, judge_server))
    assert_judged(batched)
    assert judge_server.stats()["requests"] == ROWS  # the target's online calls, and not one judge call
    ids = judge_batches(judge_server)
    assert [len(batch) for batch in ids] == [5, 5, 2]
    assert sorted(cid for batch in ids for cid in batch) == sorted(f"{JUDGE}-row-{i}-sample-0" for i in range(ROWS))
    assert judge_server.batches()["lines_answered"] == ROWS
    usage = batched.results["usage"]
    assert "batch" not in usage  # the target is online
    calls = usage["metric_calls"]["by_metric"][JUDGE]
    block = calls["batch"]
    assert {k: block[k] for k in ("batches", "requests", "resubmitted")} == {
        "batches": 3,
        "requests": ROWS,
        "resubmitted": 0,
    }
    assert (block["prompt_tokens"], block["completion_tokens"]) == (calls["prompt_tokens"], calls["completion_tokens"])
    full = (calls["prompt_tokens"] * 2.0 + calls["completion_tokens"] * 8.0) / 1e6
    assert full > 0
    assert usage["cost_usd"]["endpoints"][f"metric:{JUDGE}"] == pytest.approx(full / 2, abs=1e-6)
    assert usage["cost_usd"]["batch_saving_usd"] == pytest.approx(full / 2, abs=1e-6)

    online = run_eval(judge_config(path, judge_server, judge_mode="online"))
    assert_judged(online)
    assert judge_server.stats()["requests"] == 3 * ROWS  # its target calls and its judge calls
    assert len(judge_server.batches()["batches"]) == 3  # no batch for the online run
    assert scores_by_row(batched.rows) == scores_by_row(online.rows)
    online_calls = online.results["usage"]["metric_calls"]["by_metric"][JUDGE]
    assert (online_calls["prompt_tokens"], online_calls["completion_tokens"]) == (
        calls["prompt_tokens"],
        calls["completion_tokens"],
    )
    assert online.results["usage"]["cost_usd"]["endpoints"][f"metric:{JUDGE}"] == pytest.approx(full, abs=1e-6)


def test_judge_wait_false_then_resume_sends_no_judge_request_twice(judge_server, write_jsonl, run_eval, tmp_path):
    judge_server.batches(completion_s=600.0)  # running until the test lets them finish
    path = write_jsonl(DATA)
    out = tmp_path / "nightly"
    config = judge_config(path, judge_server, wait=False)
    submitted = run_eval(config, output=out)
    assert submitted.code == 75, submitted.stderr
    assert "--resume" in submitted.stderr and "Traceback" not in submitted.stderr
    assert not (out / "results.json").exists() and not (out / "rows").exists()
    assert judge_server.batches()["batches_created"] == 3
    still = run_eval(config, "--resume", output=out)
    assert still.code == 75, still.stderr
    assert judge_server.batches()["batches_created"] == 3  # attached, nothing new submitted
    judge_server.batches(completion_s=0.0)  # the provider finishes them (at their next poll)
    done = run_eval(config, "--resume", output=out)
    assert_judged(done)
    assert judge_server.batches()["batches_created"] == 3
    assert judge_server.batches()["lines_answered"] == ROWS  # each judge request answered once
    assert judge_server.stats()["requests"] == ROWS  # the target's, once: the resumes read them from the journal
    assert_no_request_in_two_batches(judge_server)
    block = done.results["usage"]["metric_calls"]["by_metric"][JUDGE]["batch"]
    assert (block["batches"], block["requests"], block["resubmitted"]) == (3, ROWS, 0)


def test_judge_killed_after_its_first_batch_resumes_without_sending_twice(
    judge_server, write_jsonl, run_eval, tmp_path
):
    # One batch per judge request, each an upload and a create: the kill lands after the first and before the last.
    judge_server.batches(completion_s=600.0)
    path = write_jsonl(DATA)
    out = tmp_path / "killed"
    config = judge_config(path, judge_server, max_requests=1)
    created_before = kill_after_first_batch(config, out, tmp_path, judge_server)
    assert 1 <= created_before < ROWS, created_before  # killed between the first batch and the last
    judge_server.batches(completion_s=0.0)
    resumed = run_eval(config, "--resume", output=out)
    assert_judged(resumed)
    assert judge_server.batches()["batches_created"] == ROWS  # what a clean run creates
    assert judge_server.batches()["lines_answered"] == ROWS
    assert_no_request_in_two_batches(judge_server)
    block = resumed.results["usage"]["metric_calls"]["by_metric"][JUDGE]["batch"]
    assert (block["batches"], block["requests"], block["resubmitted"]) == (ROWS, ROWS, 0)


def test_target_and_judge_both_in_batch_mode(judge_server, write_jsonl, run_eval, tmp_path):
    path = write_jsonl(DATA)
    both = run_eval(judge_config(path, judge_server, target_mode="batch"))
    assert_judged(both)
    assert judge_server.stats()["requests"] == 0  # no online call at all
    batches = judge_server.batches()["batches"]
    # Two phases: the target's 3 batches, then the judge's 3 (built from the target's answers).
    assert [b["custom_ids"][0].startswith(f"{JUDGE}-") for b in batches] == [False] * 3 + [True] * 3
    assert judge_server.batches()["lines_answered"] == 2 * ROWS
    usage = both.results["usage"]
    assert (usage["batch"]["batches"], usage["batch"]["requests"], usage["batch"]["resubmitted"]) == (3, ROWS, 0)
    judge = usage["metric_calls"]["by_metric"][JUDGE]["batch"]
    assert (judge["batches"], judge["requests"], judge["resubmitted"]) == (3, ROWS, 0)
    online = run_eval(judge_config(path, judge_server, judge_mode="online"))
    assert scores_by_row(both.rows) == scores_by_row(online.rows)

    # wait: false, on a fresh output: the target's batches first (exit 75), then on --resume the judge's.
    judge_server.reset()
    judge_server.batches(completion_s=600.0)
    out = tmp_path / "two-phases"
    config = judge_config(path, judge_server, target_mode="batch", wait=False)
    first = run_eval(config, output=out)
    assert first.code == 75, first.stderr
    assert [len(ids) for ids in judge_batches(judge_server)] == []  # no judge request before the target's answers
    assert judge_server.batches()["batches_created"] == 3
    judge_server.batches(completion_s=0.0)
    done = run_eval(config, "--resume", output=out)
    assert_judged(done)
    assert judge_server.batches()["batches_created"] == 6 and len(judge_batches(judge_server)) == 3
    assert judge_server.batches()["lines_answered"] == 2 * ROWS and judge_server.stats()["requests"] == 0
    assert_no_request_in_two_batches(judge_server)


def test_judge_batches_on_two_local_processes(judge_server, write_jsonl, run_eval):
    judge_server.batches(outcomes=["expired"])  # the first batch (a judge's: the target is online) is sent again
    config = judge_config(write_jsonl(DATA), judge_server)
    multi = run_eval(config, "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert_judged(multi)
    assert judge_server.stats()["requests"] == ROWS
    block = multi.results["usage"]["metric_calls"]["by_metric"][JUDGE]["batch"]
    assert (block["batches"], block["requests"], block["resubmitted"]) == (4, ROWS, 5)
    assert_no_request_in_two_batches(judge_server)


def test_batches_journaled_but_not_marked_finished_are_collected_on_resume(
    judge_server, write_jsonl, run_eval, tmp_path
):
    """A run that died after journaling its batches' answers and before recording them finished:
    the resume answers every request from the journal, and still collects those batches (exit 0, not 75)."""
    out = tmp_path / "died"
    config = judge_config(write_jsonl(DATA), judge_server, target_mode="batch")
    assert_judged(run_eval(config, output=out))
    finished = sorted((out / "_responses" / "batches").glob("*-finished.json"))
    assert len(finished) == 6  # the target's 3 batches and the judge's 3
    for path in finished:
        path.unlink()
    resumed = run_eval(config, "--resume", output=out)
    assert_judged(resumed)
    assert judge_server.batches()["batches_created"] == 6  # nothing sent again
    assert judge_server.batches()["lines_answered"] == 2 * ROWS
    assert len(list((out / "_responses" / "batches").glob("*-finished.json"))) == 6
    assert resumed.results["usage"]["batch"]["batches"] == 3


def test_judge_and_target_batches_on_the_portable_runner(judge_server, write_jsonl, run_eval, job_service):  # noqa: F811
    judge_server.batches(outcomes=["completed", "completed", "completed", "cancelled"])  # the judge's first batch
    config = judge_config(write_jsonl(DATA), judge_server, target_mode="batch")
    portable = run_eval(
        config, "--runner=PortableRunner", f"--job_endpoint={job_service}", "--environment_type=LOOPBACK"
    )
    assert_judged(portable)
    assert portable.results["run"]["runner"] == "PortableRunner"
    assert judge_server.stats()["requests"] == 0
    block = portable.results["usage"]["metric_calls"]["by_metric"][JUDGE]["batch"]
    assert (block["batches"], block["requests"], block["resubmitted"]) == (4, ROWS, 5)
    assert_no_request_in_two_batches(judge_server)
