"""Batch mode where features meet, end to end (the CLI on Beam's local runner, HTTP to real test servers).

Two endpoints whose Batch APIs issue the same ids, output files with several lines for one
``custom_id``, a provider that no longer has a batch or a file, a judge's price and exit code
after ``wait: false``, and the run's budget: each leaked money or blocked ``--resume`` before.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx

from beameval.testserver.harness import ServerProcess
from tests.batch.test_batch_judge import (  # noqa: F401 - judge_server: a fixture
    DATA,
    JUDGE,
    JUDGE_RULES,
    ROWS,
    assert_judged,
    judge_config,
    judge_server,
)
from tests.batch.test_batch_pipeline import (
    SMALL,
    SMALL_DATA,
    assert_complete,
    assert_no_request_in_two_batches,
    scores_by_row,
    small_config,
)

#: The test server counts words as tokens: "question N please" is 3, and its echo too.
TARGET_PRICE = {"input_per_million": 1.0, "output_per_million": 4.0, "batch_discount": 0.5}


def two_endpoints(path: Path, target: ServerProcess, judge: ServerProcess, **batch: Any) -> dict[str, Any]:
    """The target on one server and the judge on another, both in batch mode, both priced."""
    config = judge_config(path, judge, target_mode="batch", **batch)
    config["target"]["model"]["url"] = target.base_url
    config["target"]["model"]["pricing"] = TARGET_PRICE
    return config


def batch_ids(server: ServerProcess) -> list[str]:
    return sorted(b["id"] for b in server.batches()["batches"])


def test_two_endpoints_issuing_the_same_ids_never_mix(write_jsonl, run_eval, tmp_path):
    """Before: the target billed at full price; the first --resume published every row failed, the next
    submitted the judge's batches again. And the judge's first --resume exited 1 while its batches ran."""
    with ServerProcess() as target, ServerProcess() as judge:
        for server in (target, judge):
            server.batches(completion_s=600.0)
        judge.configure(rules=JUDGE_RULES)
        config = two_endpoints(write_jsonl(DATA), target, judge, wait=False)
        out = tmp_path / "nightly"
        first = run_eval(config, output=out)
        assert first.code == 75, first.stderr
        target.batches(finish_existing=True)  # the target's batches end; what is created next runs on
        second = run_eval(config, "--resume", output=out)
        assert second.code == 75, second.stderr  # the judge's batches are running: pending, not failed
        assert "pending" in second.stderr and not (out / "results.json").exists()
        assert batch_ids(target) == batch_ids(judge) and len(batch_ids(judge)) == 3  # the same ids on both
        judge.batches(finish_existing=True)
        done = run_eval(config, "--resume", output=out)
        assert_judged(done)
        for server in (target, judge):
            state = server.batches()
            assert (state["batches_created"], state["lines_answered"]) == (3, ROWS)  # nothing sent twice
            assert server.stats()["requests"] == 0
            assert_no_request_in_two_batches(server)
        usage = done.results["usage"]
        block = usage["batch"]
        assert (block["batches"], block["requests"], block["resubmitted"]) == (3, ROWS, 0)
        assert (block["prompt_tokens"], block["completion_tokens"]) == (3 * ROWS, 3 * ROWS)
        judged = usage["metric_calls"]["by_metric"][JUDGE]["batch"]
        assert (judged["batches"], judged["requests"], judged["resubmitted"]) == (3, ROWS, 0)
        assert judged["prompt_tokens"] > 0 and judged["completion_tokens"] > 0
        target_cost = (3 * ROWS * 1.0 + 3 * ROWS * 4.0) / 1e6 * 0.5
        judge_cost = (judged["prompt_tokens"] * 2.0 + judged["completion_tokens"] * 8.0) / 1e6 * 0.5
        cost = usage["cost_usd"]
        assert math.isclose(cost["endpoints"]["target"], target_cost, abs_tol=1e-9)
        assert math.isclose(cost["endpoints"][f"metric:{JUDGE}"], judge_cost, abs_tol=1e-9)
        assert math.isclose(cost["batch_saving_usd"], target_cost + judge_cost, abs_tol=1e-9)


def test_duplicated_output_lines_keep_the_first_and_bill_once(batch_server, write_jsonl, run_eval, tmp_path):
    """Before: the last line won in the run and the first on --resume (1.0 vs 0.8), and tokens counted twice."""
    batch_server.batches(duplicate_lines=True)  # each line twice (the second another answer), one unknown id
    out = tmp_path / "dup"
    config = small_config(write_jsonl(SMALL_DATA), batch_server)
    config["target"]["model"]["pricing"] = TARGET_PRICE
    done = run_eval(config, output=out)
    assert_complete(done)  # every row scored on the first line: the echo
    usage = done.results["usage"]
    assert usage["batch"] == {
        "batches": 4,
        "requests": SMALL,
        "resubmitted": 0,
        "prompt_tokens": 3 * SMALL,
        "completion_tokens": 3 * SMALL,
        "ignored_lines": SMALL + 4,  # a second line per request, and one unknown id per batch
    }
    assert math.isclose(usage["cost_usd"]["total"], (3 * SMALL * 1.0 + 3 * SMALL * 4.0) / 1e6 * 0.5, abs_tol=1e-9)
    for finished in (out / "_responses" / "batches").glob("*-finished.json"):
        finished.unlink()  # collected again on --resume, from the same files
    resumed = run_eval(config, "--resume", output=out)
    assert_complete(resumed)
    assert scores_by_row(resumed.rows) == scores_by_row(done.rows)
    assert batch_server.batches()["batches_created"] == 4


def test_a_batch_the_provider_no_longer_has_is_sent_again(batch_server, write_jsonl, run_eval, tmp_path):
    """Before: GET /batches/{id} answering 404 made every --resume exit 2."""
    batch_server.batches(completion_s=600.0)
    out = tmp_path / "forgotten"
    config = small_config(write_jsonl(SMALL_DATA), batch_server, wait=False)
    assert run_eval(config, output=out).code == 75
    forgotten = batch_ids(batch_server)[0]
    batch_server.batches(forget_batches=[forgotten], completion_s=0.0)
    again = run_eval(config, "--resume", output=out)
    assert again.code == 75, again.stderr  # its requests went into a new batch (wait: false polls once)
    done = run_eval(config, "--resume", output=out)
    assert_complete(done)
    block = done.results["usage"]["batch"]
    assert (block["batches"], block["requests"], block["resubmitted"]) == (5, SMALL, 50)
    assert batch_server.batches()["lines_answered"] == SMALL


def test_an_output_file_the_provider_no_longer_has_is_sent_again(batch_server, write_jsonl, run_eval, tmp_path):
    """Before: GET /files/{id}/content answering 404 made every --resume exit 2."""
    batch_server.batches(completion_s=600.0)
    out = tmp_path / "lost-file"
    config = small_config(write_jsonl(SMALL_DATA), batch_server, wait=False)
    assert run_eval(config, output=out).code == 75
    batch_server.batches(completion_s=0.0)
    first = batch_ids(batch_server)[0]
    with httpx.Client(base_url=batch_server.base_url) as provider:
        output_file = provider.get(f"/batches/{first}").json()["output_file_id"]  # it completes now
        assert provider.delete(f"/files/{output_file}").json()["deleted"] is True
    again = run_eval(config, "--resume", output=out)
    assert again.code == 75, again.stderr  # its requests went into a new batch (wait: false polls once)
    done = run_eval(config, "--resume", output=out)
    assert_complete(done)
    block = done.results["usage"]["batch"]
    assert (block["batches"], block["requests"], block["resubmitted"]) == (5, SMALL, 50)
    assert batch_server.batches()["lines_answered"] == SMALL + 50  # the lost file's 50 answered again


def test_a_batch_that_would_cross_the_budget_is_not_submitted(batch_server, write_jsonl, run_eval):
    """Before: params.budget was ignored in batch mode (58 tokens spent against 10)."""
    config = small_config(write_jsonl(SMALL_DATA), batch_server)
    config["params"]["budget"] = {"max_tokens": 10}
    refused = run_eval(config)
    assert refused.code == 5, refused.stderr
    assert (batch_server.batches()["files_uploaded"], batch_server.batches()["batches_created"]) == (0, 0)
    assert refused.results["stopped"] == "budget" and refused.results["counts"]["skipped"] == SMALL

    # Room for any two of the four batches while they run, never three: a request is charged
    # ceil(characters / 4) + 256, held until its batch is collected.
    batch_server.reset()
    batch_server.batches(completion_s=600.0)
    config = small_config(write_jsonl(SMALL_DATA), batch_server, wait=False)
    config["params"]["budget"] = {"max_tokens": _per_chunk()[-1] + _per_chunk()[-2]}
    partial = run_eval(config)
    assert partial.code == 75, partial.stderr  # two batches running, the other rows not sent
    assert batch_server.batches()["batches_created"] == 2


def _per_chunk() -> list[int]:
    """The estimates of ``small_config``'s four batches of 50 rows, smallest first."""
    return sorted(
        sum(math.ceil(len(r["question"]) / 4) + 256 for r in SMALL_DATA[i : i + 50]) for i in range(0, SMALL, 50)
    )


def test_a_resume_holds_what_the_batches_still_running_hold(batch_server, write_jsonl, run_eval, tmp_path):
    """Before: ``--resume`` forgot the estimates of the batches it found running and submitted the other two of four
    against a budget with room for two (their estimates passed it by half)."""
    batch_server.batches(completion_s=600.0)  # running until the test lets them finish
    out = tmp_path / "held"
    config = small_config(write_jsonl(SMALL_DATA), batch_server, wait=False)
    budget = _per_chunk()[-1] + _per_chunk()[-2]  # any two batches, never three
    config["params"]["budget"] = {"max_tokens": budget}
    assert run_eval(config, output=out).code == 75
    assert batch_server.batches()["batches_created"] == 2
    held = [json.loads(p.read_text())["held"] for p in (out / "_responses" / "batches").glob("*-uploaded.json")]
    assert len(held) == 2 and all(tokens in _per_chunk() and usd == 0 for tokens, usd in held)

    again = run_eval(config, "--resume", output=out)
    assert again.code == 75, again.stderr  # still running: nothing else fits beside what they hold
    assert batch_server.batches()["batches_created"] == 2

    batch_server.batches(finish_existing=True)  # collected, they hold nothing more: what they used is spent
    done = run_eval(config, "--resume", output=out)
    assert done.code == 75, done.stderr  # their rows are in; others went into new batches, as far as room allows
    assert batch_server.batches()["batches_created"] in (3, 4)
    spent = 6 * 100  # the collected batches' answers: 3 tokens in, 3 out, a row
    new = sum(_batch_estimate(batch_server)) - sum(tokens for tokens, _usd in held)
    assert 0 < new <= budget - spent  # what the new batches hold fits in what is left


def test_overwrite_never_abandons_live_batches(batch_server, write_jsonl, run_eval, tmp_path):
    batch_server.batches(completion_s=600.0)
    out = tmp_path / "live"
    config = small_config(write_jsonl(SMALL_DATA), batch_server, wait=False)
    assert run_eval(config, output=out).code == 75
    first = batch_ids(batch_server)
    refused = run_eval(config, "--overwrite", output=out)
    assert refused.code == 2, refused.stderr
    assert all(batch_id in refused.stderr for batch_id in first) and len(first) == 4
    assert "--resume" in refused.stderr and "--cancel_batches" in refused.stderr
    assert len(list((out / "_responses" / "batches").glob("*-created.json"))) == 4  # nothing deleted
    assert (batch_server.batches()["batches_created"], batch_server.batches()["cancels"]) == (4, 0)

    replaced = run_eval(config, "--overwrite", "--cancel_batches", output=out)
    assert replaced.code == 75, replaced.stderr  # the new run's own batches, submitted
    state = batch_server.batches()
    assert (state["batches_created"], state["cancels"]) == (8, 4)
    statuses = {b["id"]: b["status"] for b in state["batches"]}
    assert [statuses[batch_id] for batch_id in first] == ["cancelled"] * 4
    recorded = {p.read_text() for p in (out / "_responses" / "batches").glob("*-created.json")}
    assert len(recorded) == 4 and not any(batch_id in text for batch_id in first for text in recorded)


def test_a_batch_judge_s_answers_are_the_job_s_spend(judge_server, write_jsonl, run_eval, tmp_path):  # noqa: F811
    """Before: a judge in batch mode was left out of the job's ledger: ``usage.budget`` said 72 tokens and the
    target's dollars only, though the judge's batches, collected by the --resume, used 154 tokens more."""
    judge_server.batches(completion_s=600.0)  # running until the test lets them finish
    config = judge_config(write_jsonl(DATA), judge_server, wait=False)
    config["target"]["model"]["pricing"] = TARGET_PRICE
    config["params"]["budget"] = {"max_tokens": 1_000_000}
    out = tmp_path / "judged"
    submitted = run_eval(config, output=out)
    assert submitted.code == 75, submitted.stderr
    judge_server.batches(completion_s=0.0)  # the provider finishes them (at their next poll)
    done = run_eval(config, "--resume", output=out)
    assert_judged(done)
    usage = done.results["usage"]
    judged = usage["metric_calls"]["by_metric"][JUDGE]["batch"]
    judge_tokens = judged["prompt_tokens"] + judged["completion_tokens"]
    assert judge_tokens > 0
    target_usd = (3 * ROWS * 1.0 + 3 * ROWS * 4.0) / 1e6  # online, full price
    judge_usd = (judged["prompt_tokens"] * 2.0 + judged["completion_tokens"] * 8.0) / 1e6 * 0.5
    budget = usage["budget"]
    assert budget["spent_tokens"] == 6 * ROWS + judge_tokens  # the target's answers (first run), the judge's (resume)
    assert math.isclose(budget["spent_usd"], target_usd + judge_usd, abs_tol=1e-6)
    assert math.isclose(usage["cost_usd"]["total"], target_usd + judge_usd, abs_tol=1e-9)


def test_batch_target_and_batch_judge_share_one_budget(write_jsonl, run_eval):
    """A target and a judge in batch mode draw on one budget: the judge's batches, which come second, find what
    the target's answers used spent, and room for two of their three while they run (each endpoint with a budget
    of its own would have submitted all three)."""
    with ServerProcess() as target, ServerProcess() as judge:
        judge.configure(rules=JUDGE_RULES)
        for server in (target, judge):
            server.batches(validating_s=0.0, completion_s=0.0, outcomes=[])
        config = two_endpoints(write_jsonl(DATA), target, judge, wait=False)
        assert_judged(run_eval(config))
        judge_estimates = _batch_estimate(judge)
        assert len(judge_estimates) == 3 and sum(judge_estimates) > 1

        for server in (target, judge):
            server.reset()
        target.batches(validating_s=0.0, completion_s=0.0, outcomes=[])
        judge.batches(validating_s=0.0, completion_s=600.0, outcomes=[])  # the judge's batches keep running
        target_tokens = 6 * ROWS  # "question N please" and its echo, 3 words each
        config["params"]["budget"] = {"max_tokens": target_tokens + sum(judge_estimates) - 1}
        result = run_eval(config)
        assert result.code == 75, result.stderr  # the judge's batches are running
        assert (target.batches()["batches_created"], judge.batches()["batches_created"]) == (3, 2)


def _batch_estimate(server: ServerProcess) -> list[int]:
    """Each batch's estimate as charged before submission: per line, the characters of its messages and of its
    ``response_format`` as JSON / 4 rounded up, plus its ``max_tokens`` or 256 (from the uploaded input files, not
    by the evaluator's estimator)."""
    sizes = []
    with httpx.Client(base_url=server.base_url) as provider:
        for batch in server.batches()["batches"]:
            input_file = provider.get(f"/batches/{batch['id']}").json()["input_file_id"]
            total = 0
            for line in provider.get(f"/files/{input_file}/content").text.splitlines():
                body = json.loads(line)["body"]
                assert set(body) <= {"model", "messages", "max_tokens", "response_format", "temperature"}, body
                chars = sum(len(message["content"]) for message in body["messages"])
                chars += len(json.dumps(body["response_format"])) if "response_format" in body else 0
                total += math.ceil(chars / 4) + body.get("max_tokens", 256)  # 256: a request that sets none
            sizes.append(total)
    return sorted(sizes)


def test_online_target_and_batch_judge_share_one_budget(judge_server, write_jsonl, run_eval):  # noqa: F811
    """Before: a batch's estimate was checked against a budget of its own in each process, blind to what the job's
    online requests had spent: an online target and a batch judge could together pass ``params.budget``."""
    config = judge_config(write_jsonl(DATA), judge_server)
    config["target"]["model"]["pricing"] = TARGET_PRICE
    free = run_eval(config)
    assert_judged(free)
    judge_batches_estimate = _batch_estimate(judge_server)
    assert len(judge_batches_estimate) == 3
    target_tokens = free.results["usage"]["prompt_tokens"] + free.results["usage"]["completion_tokens"]
    assert target_tokens == 6 * ROWS  # "question N please" and its echo, 3 words each

    # Room for every judge batch, or for the target's answers and all but one token of them: never both while
    # the judge's batches run (each holds its estimate until it is collected).
    judge_server.reset()
    config = judge_config(write_jsonl(DATA), judge_server, wait=False)
    config["target"]["model"]["pricing"] = TARGET_PRICE
    config["params"]["budget"] = {"max_tokens": sum(judge_batches_estimate) + target_tokens - 1}
    judge_server.batches(validating_s=0.0, completion_s=600.0, outcomes=[])
    judge_server.configure(rules=JUDGE_RULES)
    limited = run_eval(config)
    assert limited.code == 75, limited.stderr
    assert judge_server.batches()["batches_created"] == 2


def test_a_collected_batch_leaves_what_it_did_not_use_to_the_online_judge(judge_server, write_jsonl, run_eval):  # noqa: F811
    """Before: the target's batches held their estimates until the run ended, beside what their answers used, and
    an online judge after them found no room in a budget with room for all of it: every row skipped, exit 5."""
    config = judge_config(write_jsonl(DATA), judge_server, judge_mode="batch", target_mode="batch")
    assert_judged(run_eval(config))
    judge_estimates = _batch_estimate(judge_server)  # the judge's requests, batched: their online estimates too
    judge_request = max(judge_estimates) / 5  # max_requests: 5, the largest batch full

    judge_server.reset()
    judge_server.batches(validating_s=0.0, completion_s=0.0, outcomes=[])
    judge_server.configure(rules=JUDGE_RULES)
    config = judge_config(write_jsonl(DATA), judge_server, judge_mode="online", target_mode="batch")
    target_estimate = sum(math.ceil(len(row["question"]) / 4) + 256 for row in DATA)
    target_tokens = 6 * ROWS  # what the target's answers use
    # Room for the target's batches while they run, not one token more; after them, for what they used and more
    # than one judge request at a time (never beside the target's estimates too).
    config["params"]["budget"] = {"max_tokens": target_estimate}
    assert target_estimate - target_tokens > judge_request
    judged = run_eval(config)
    assert_judged(judged)
    assert judged.results["usage"]["budget"]["spent_tokens"] <= config["params"]["budget"]["max_tokens"]
