"""One job, one bill: ``params.budget`` holds for the whole job, whatever splits it.

Every test runs the CLI against the project's test server (real HTTP, real Beam runners)
and counts what the server billed, independently of what the run reports: the echo
answers ``answer 17`` with itself (2 prompt + 2 completion tokens), the judge's rule
answers two words to a 5-word prompt (7 tokens). The splits measured: two targets and a
judge they share, a run killed with kill -9 and resumed, 1, 2 and 4 worker processes,
and a request whose billed input is mostly its ``tools``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from beameval.inference.estimate import estimate_tokens
from beameval.testserver.harness import ServerProcess
from tests.conftest import CliResult
from tests.pipeline.test_resume_pipeline import start_run
from tests.quota.redis_server import redis_server

pytestmark = pytest.mark.slow

#: The judge's reply: 2 words.
GRADE = json.dumps({"grade": 4})


def _rows(count: int) -> list[dict[str, Any]]:
    return [{"question": f"answer {i}", "answer": f"answer {i % 4}"} for i in range(count)]


def _two_targets(server: ServerProcess) -> dict[str, Any]:
    """Targets "first" and "second": two model names on one server, both asked the row's question."""
    return {
        "targets": [
            {"name": name, "model": {"url": server.base_url, "name": name, "format": "openai"}}
            for name in ("first", "second")
        ],
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
    }


def _billed(server: ServerProcess) -> int:
    """The tokens the test server billed: each prompt's words, and its reply's (the echo, or the judge's one word)."""
    total = 0
    for prompt, count in server.stats()["per_prompt"].items():
        words = len(prompt.split())
        total += count * (words + (len(GRADE.split()) if prompt.startswith("JUDGE:") else words))
    return total


def _judge(server: ServerProcess) -> dict[str, Any]:
    return {
        "type": "llm-judge",
        "model": {"url": server.base_url, "name": "judge", "format": "openai"},
        "prompt_template": {"messages": [{"role": "user", "content": "JUDGE: {{ sample.output_text }} vs x"}]},
        "scores": [{"name": "grade", "minimum": 1, "maximum": 5}],
        "inference": {"max_tokens": 4},  # else 1,024 reserved a call: more than the whole budget
    }


def test_two_targets_and_a_shared_judge_spend_one_budget(
    clean_server: ServerProcess, write_jsonl: Any, run_eval: Any
) -> None:
    """Two targets (one server, two model names) and one judge: N tokens for all of them, exit 5, each row once."""
    rows, budget = 40, 600  # the job needs 2 x 40 x (4 + 7) = 880 tokens
    clean_server.configure(rules=[{"match": "JUDGE:", "reply": GRADE}])
    config = {
        "dataset": {"path": str(write_jsonl(_rows(rows)))},
        **_two_targets(clean_server),
        "params": {"parallelism": 4, "inference": {"max_tokens": 4}, "budget": {"max_tokens": budget}},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}, _judge(clean_server)],
    }
    result = run_eval(config, "--progress_interval", "0")
    billed = _billed(clean_server)
    print(f"two targets and a judge, budget {budget}: the server billed {billed} tokens, exit {result.code}")
    assert result.code == 5, result.stderr
    assert "reached its budget" in result.stderr
    # Every reservation is at least the reply's real use (prompt characters / 4 + max_tokens), so nothing in
    # flight can take the job past N.
    assert billed <= budget
    assert billed >= 0.9 * budget  # stopped at the budget, not at half of it
    top = result.results
    assert (top["status"], top["complete"], top["stopped"]) == ("stopped", False, "budget")
    assert top["usage"]["budget"]["spent_tokens"] == billed
    skipped = 0
    for name in ("first", "second"):
        target = CliResult(0, "", "", result.output / "targets" / name)
        assert sorted(row["row_index"] for row in target.rows) == list(range(rows))  # every row exactly once
        statuses = [row["status"] for row in target.rows]
        assert set(statuses) <= {"ok", "skipped"}
        skipped += statuses.count("skipped")
        assert target.results["usage"]["budget"]["spent_tokens"] == billed  # the job's spend, in each target's
    assert skipped > 0
    assert max(clean_server.stats()["per_prompt"].values()) <= 2  # each target's prompt once (they are the same)


def test_a_resume_of_a_spent_job_sends_nothing(clean_server: ServerProcess, write_jsonl: Any, run_eval: Any) -> None:
    """Before: each target's first request (the preflight's) was checked against the whole params.budget, not what
    the job had left: a --resume of a job that had spent its budget sent one more request per target (2 here)."""
    rows, budget = 40, 200  # the job needs 2 x 40 x 4 = 320 tokens
    clean_server.configure(rules=[{"match": "answer 0", "status": 400}])  # row 0 fails: the resume's first request
    config = {
        "dataset": {"path": str(write_jsonl(_rows(rows)))},
        **_two_targets(clean_server),
        "params": {
            "parallelism": 4,
            "max_retries": 0,
            "ignore_request_failure": True,
            "inference": {"max_tokens": 4},
            "budget": {"max_tokens": budget},
        },
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    spent = run_eval(config, "--skip_preflight", "--progress_interval", "0")  # the preflight would stop at row 0
    assert spent.code == 5, spent.stderr
    assert spent.results["usage"]["budget"]["spent_tokens"] > budget - 5  # less than one more request is left
    clean_server.configure(rules=[])
    clean_server.reset()

    resumed = run_eval(config, "--resume", "--progress_interval", "0", output=spent.output)
    print(
        f"--resume of a job that spent {spent.results['usage']['budget']['spent_tokens']} of {budget} tokens: "
        f"{clean_server.stats()['requests']} requests sent"
    )
    assert resumed.code == 5, resumed.stderr
    assert clean_server.stats()["requests"] == 0
    assert resumed.results["usage"]["budget"]["spent_tokens"] == spent.results["usage"]["budget"]["spent_tokens"]


def _killed_config(write_jsonl: Any, model_target: Any, rows: int, budget: int) -> dict[str, Any]:
    return {
        "dataset": {"path": str(write_jsonl(_rows(rows)))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, "inference": {"max_tokens": 4}, "budget": {"max_tokens": budget}},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


def test_a_killed_runs_spend_is_carried_into_its_resume(
    clean_server: ServerProcess, write_jsonl: Any, model_target: Any, run_eval: Any, tmp_path: Path
) -> None:
    """kill -9 after half the budget, then --resume: the two invocations together stay within the budget."""
    rows, budget = 300, 600  # the dataset needs 1,200 tokens
    clean_server.configure(latency_ms=20)
    config = _killed_config(write_jsonl, model_target, rows, budget)
    output = tmp_path / "killed"
    process = start_run(config, output, tmp_path)
    deadline = time.monotonic() + 120
    while clean_server.stats()["by_status"].get("200", 0) < budget // 4 // 2:  # half the budget answered
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run never got halfway through its budget"
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)  # the driver runs the workers (in_memory): nothing is flushed on the way
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    killed = _billed(clean_server)
    assert 0 < killed < budget

    resumed = run_eval(config, "--resume", "--progress_interval", "0", output=output)
    billed = _billed(clean_server)
    print(f"kill -9 at {killed} tokens, then --resume: {billed} tokens billed in all against {budget}")
    assert resumed.code == 5, resumed.stderr
    in_flight = 4 * 4  # replies billed by the server but not yet read when the kill came: 4 tokens each
    assert billed <= budget + in_flight  # the killed invocation's spend is not forgotten
    assert billed >= budget - 7
    results = resumed.results
    assert billed - in_flight <= results["usage"]["budget"]["spent_tokens"] <= billed  # every invocation of the job
    used = results["usage"]["prompt_tokens"] + results["usage"]["completion_tokens"]
    assert billed - in_flight <= used <= billed
    ok = [row for row in resumed.rows if row["status"] == "ok"]
    assert 4 * len(ok) <= billed and sorted(row["row_index"] for row in resumed.rows) == list(range(rows))


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_worker_processes_spend_the_whole_budget_between_them(
    workers: int, clean_server: ServerProcess, write_jsonl: Any, model_target: Any, run_eval: Any
) -> None:
    """W local worker processes stop when the job reaches its budget, not when one's 1/W share ran out.

    60 rows cross the spread in one batch (``transforms.spread.BATCH_ROWS``), so one worker sends them all:
    with a fixed 1/W share it stopped at 1/W of the budget.
    """
    rows, budget = 60, 200  # the dataset needs 240 tokens
    config = _killed_config(write_jsonl, model_target, rows, budget)
    result = run_eval(
        config,
        "--direct_running_mode=multi_processing",
        f"--direct_num_workers={workers}",
        "--progress_interval",
        "0",
    )
    billed = _billed(clean_server)
    print(f"{workers} worker processes: {billed} of {budget} tokens billed ({billed / budget:.0%})")
    assert result.code == 5, result.stderr
    assert 0.9 * budget <= billed <= budget
    assert result.results["usage"]["budget"]["spent_tokens"] == billed
    assert sorted(row["row_index"] for row in result.rows) == list(range(rows))


#: Tool definitions that are billed as input: about 2,000 characters of JSON, so about 500 tokens.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "Looks something up in a catalogue that is described at some length here. " * 3,
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
    for i in range(6)
]


def test_the_estimate_counts_tools_system_prompt_and_response_format() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    bare, _ = estimate_tokens(body, 0)
    tools = len(json.dumps(TOOLS))
    with_tools, _ = estimate_tokens({**body, "tools": TOOLS}, 0)
    assert with_tools >= bare + tools // 4
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"} | {"title": "y" * 400}}}
    assert estimate_tokens({**body, "response_format": schema}, 0)[0] >= bare + 100
    system = {"messages": [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "hi"}]}
    assert estimate_tokens(system, 0)[0] >= 100


def test_a_budget_in_dollars_holds_when_tools_are_billed(
    clean_server: ServerProcess, write_jsonl: Any, model_target: Any, run_eval: Any
) -> None:
    """The provider bills the tools as input (500 prompt tokens a request): the cap holds, not 6 times over."""
    billed_prompt = 500
    clean_server.configure(
        rules=[{"match": "answer", "reply_fields": {"usage": {"prompt_tokens": billed_prompt, "completion_tokens": 2}}}]
    )
    price = {"input_per_million": 10.0, "output_per_million": 10.0}  # 10 $ a million tokens
    cap = 0.05  # 10 requests' worth (502 tokens each)
    config = _killed_config(write_jsonl, model_target, 60, 10**9)
    config["target"] = model_target(pricing=price)
    config["params"] = {
        "parallelism": 16,
        "inference": {"max_tokens": 4, "tools": TOOLS},
        "budget": {"max_usd": cap},
    }
    result = run_eval(config, "--progress_interval", "0")
    sent = clean_server.stats()["by_status"].get("200", 0)
    spent = sent * (billed_prompt + 2) * 10.0 / 1e6
    print(f"tools billed as input: {sent} requests, ${spent:.4f} against a ${cap} cap")
    assert result.code == 5, result.stderr
    assert spent <= cap * 1.0001
    assert result.results["usage"]["budget"]["spent_usd"] == pytest.approx(spent)


def test_a_judge_shared_by_two_targets_keeps_one_rate_limit(
    clean_server: ServerProcess, write_jsonl: Any, run_eval: Any, tmp_path: Path
) -> None:
    """The judge's rate_limit holds for the job: both targets' judge calls together, one key in Redis, not R each."""
    rpm, rows = 600, 40  # 10 requests a second; 80 judge calls
    with ServerProcess(rules=[{"match": "JUDGE:", "reply": GRADE}]) as judge_server, redis_server(tmp_path) as redis:
        judge_server.configure(quota={"requests_per_minute": rpm})  # the provider answers 429 past R
        judge = _judge(judge_server)
        judge["model"]["rate_limit"] = {"requests_per_minute": rpm, "shared": redis.url}
        judge["parallelism"] = 16
        config = {
            "dataset": {"path": str(write_jsonl(_rows(rows)))},
            **_two_targets(clean_server),
            "params": {"parallelism": 16, "inference": {"max_tokens": 4}, "max_retries": 6},
            "metrics": [_judge(clean_server) | {"model": judge["model"], "parallelism": 16}],
        }
        result = run_eval(config, "--progress_interval", "0")
        stats = judge_server.stats()
        keys = redis.run_keys()
    assert result.code == 0, result.stderr
    job = json.loads((result.output / "_responses" / "job.json").read_text())["id"]
    assert len(keys) == 1 and f"{{{job}:" in keys[0], keys  # one limit: the job's key for the judge's endpoint
    sent = [second["requests"] + second["limited"] for second in stats["quota"]["timeline"]]  # admitted or 429
    windows = [sum(sent[i : i + 5]) for i in range(max(1, len(sent) - 4))]
    limit = rpm / 60 * 5
    print(f"judge shared by two targets: {stats['by_status']}, busiest 5 s {max(windows)} sent (limit {limit:g})")
    assert stats["by_status"] == {"200": 2 * rows}  # one limit for both targets: never a 429
    assert max(windows) <= 1.1 * limit + rpm / 60 * 0.5  # and a half-second burst at the start
