"""The preflight sends the first row's request as the run will, stops a broken config in seconds, never pays twice.

Through the real CLI against the project's test server, which counts what it receives:
per prompt, and per route it does not have.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from beameval.testserver.harness import ServerProcess
from tests.pipeline.test_resume_pipeline import interrupt_halfway, journaled_keys, start_run
from tests.pipeline.test_runners import DATAFLOW_DRY_RUN

ROWS = 30
DATA = [{"question": f"question {i}", "answer": f"question {i}" if i % 3 else "other"} for i in range(ROWS)]
EXACT = sum(1 for i in range(ROWS) if i % 3)
PRICING = {"input_per_million": 2.0, "output_per_million": 8.0}


def config_for(data: Path, target: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {
        "dataset": {"path": str(data)},
        "target": target,
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, "max_retries": 1, **params},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


def chat_requests(server: ServerProcess) -> int:
    """Chat requests the server received, on its routes and on any other path."""
    stats = server.stats()
    return stats["requests"] + sum(n for route, n in stats["not_found"].items() if route.startswith("POST "))


def test_a_wrong_url_path_stops_the_run_in_seconds_after_one_request(
    clean_server, write_jsonl, run_eval, tmp_path
) -> None:
    target = {"model": {"url": f"{clean_server.root_url}/v2", "name": "test-model", "format": "openai"}}
    result = run_eval(config_for(write_jsonl(DATA), target))
    assert result.code == 2, result.stderr
    assert "preflight: the first row's request to the target.model endpoint" in result.stderr
    assert f"POST {clean_server.root_url}/v2/chat/completions" in result.stderr
    assert "HTTP 404 Not Found" in result.stderr and "no route POST /v2/chat/completions" in result.stderr
    assert "Check target.model.url" in result.stderr
    stats = clean_server.stats()
    assert stats["not_found"]["POST /v2/chat/completions"] == 1 and chat_requests(clean_server) == 1
    assert not result.output.exists()  # locked, then removed: the failed preflight left nothing behind


def test_a_model_the_endpoint_does_not_serve_stops_the_run(clean_server, model_target, write_jsonl, run_eval) -> None:
    clean_server.configure(models=["test-model"])
    result = run_eval(config_for(write_jsonl(DATA), model_target(name="gpt-nope")))
    assert result.code == 2, result.stderr
    assert "HTTP 404 Not Found" in result.stderr
    assert "The model 'gpt-nope' does not exist or you do not have access to it." in result.stderr
    assert "('gpt-nope')" in result.stderr  # the hint names the model
    assert clean_server.stats()["requests"] == 1 and not result.output.exists()


def test_a_refused_parameter_stops_the_run(clean_server, model_target, write_jsonl, run_eval) -> None:
    clean_server.configure(unsupported_params=["temperature"])
    result = run_eval(config_for(write_jsonl(DATA), model_target(), inference={"temperature": 0.5}))
    assert result.code == 2, result.stderr
    assert "HTTP 400 Bad Request" in result.stderr
    assert "Unsupported parameter: 'temperature' is not supported with this model." in result.stderr
    assert clean_server.stats()["requests"] == 1


def test_a_reply_the_run_cannot_parse_stops_the_run(clean_server, model_target, write_jsonl, run_eval) -> None:
    clean_server.configure(malformed_rate=1.0)
    result = run_eval(config_for(write_jsonl(DATA), model_target()))
    assert result.code == 2, result.stderr
    assert "got no usable answer: request failed after 2 attempts: malformed reply" in result.stderr
    assert clean_server.stats()["requests"] == 2  # max_retries 1: the run's own retries, no more


def test_a_normal_run_pays_each_prompt_once_and_scores_as_without_the_preflight(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    data = write_jsonl(DATA)
    config = config_for(data, model_target(pricing=PRICING))
    with_preflight = run_eval(config)
    assert with_preflight.code == 0, with_preflight.stderr
    assert clean_server.stats()["per_prompt"] == {row["question"]: 1 for row in DATA}  # row 0 included
    journal = list((with_preflight.output / "_responses").glob("*.jsonl"))
    assert len(journal) >= 2  # the preflight's shard and the workers'
    usage = with_preflight.results["usage"]
    assert usage["requests"] == ROWS and usage["cache"] == {"hits": 0, "misses": ROWS}
    first = with_preflight.rows[0]
    assert (first["cached"], first["attempts"], first["status"]) == (False, 1, "ok")

    clean_server.reset()
    without = run_eval(config, "--skip_preflight")
    assert without.code == 0, without.stderr
    assert clean_server.stats()["requests"] == ROWS
    # 2 prompt and 2 completion tokens a row (the echo), counted once each: by hand.
    tokens = (usage["prompt_tokens"], usage["completion_tokens"])
    assert tokens == (2 * ROWS, 2 * ROWS)
    assert usage["cost_usd"]["total"] == pytest.approx((2.0 * 2 * ROWS + 8.0 * 2 * ROWS) / 1e6)
    for key in ("requests", "attempts", "prompt_tokens", "completion_tokens", "cost_usd", "cache"):
        assert usage[key] == without.results["usage"][key], key
    assert with_preflight.results["aggregate_scores"] == without.results["aggregate_scores"]
    assert with_preflight.score("exact-match.exact-match")["sum"] == EXACT
    columns = ("row_index", "status", "output_text", "exact-match.exact-match", "cached", "attempts")
    assert [tuple(r[c] for c in columns) for r in with_preflight.rows] == [
        tuple(r[c] for c in columns) for r in without.rows
    ]


def test_the_workers_send_at_once_when_the_preflights_reply_advertised_no_limits(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    """The preflight's reply said what the lone first request would learn: the workers need no round trip of it."""
    clean_server.configure(latency_ms=1000)
    result = run_eval(config_for(write_jsonl(DATA[:9]), model_target(), parallelism=8))
    assert result.code == 0, result.stderr
    stats = clean_server.stats()
    assert stats["requests"] == 9 and stats["peak_in_flight"] == 8
    # The 8 rows left go in one round trip (1 s); had the first gone alone, two (2 s).
    assert stats["last_response_at"] - stats["second_request_at"] < 1.6


def test_the_workers_keep_the_limits_the_preflights_reply_advertised(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    """600 a minute, a bucket of 10 at the server: 29 rows at once would get 19 429s; paced from the start, none."""
    clean_server.configure(quota={"requests_per_minute": 600, "headers": True})
    result = run_eval(config_for(write_jsonl(DATA), model_target(), parallelism=32, max_retries=0))
    assert result.code == 0, result.stderr
    assert clean_server.stats()["by_status"] == {"200": ROWS}


def test_the_budget_counts_the_preflights_tokens_once(clean_server, model_target, write_jsonl, run_eval) -> None:
    # Each row reserves 3 + 4 = 7 tokens and uses 4 (2 prompt + 2 completion words), one request at a time.
    # Of 121 tokens the preflight used 4, so the workers have 117: 28 rows fit (4 * 27 + 7 <= 117), the 29th
    # does not. Had the preflight's tokens not been counted, all 29 would have fit (4 * 28 + 7 <= 121).
    config = config_for(
        write_jsonl(DATA), model_target(), parallelism=1, inference={"max_tokens": 4}, budget={"max_tokens": 121}
    )
    result = run_eval(config)
    assert result.code == 5, result.stderr
    assert result.results["counts"] == {"rows": ROWS, "ok": ROWS - 1, "errors": 0, "skipped": 1}
    assert result.results["usage"]["budget"]["spent_tokens"] == 4 * (ROWS - 1)  # the preflight's 4 once
    assert clean_server.stats()["requests"] == ROWS - 1


def test_a_fresh_run_does_not_answer_from_an_old_journal(clean_server, model_target, write_jsonl, run_eval) -> None:
    config = config_for(write_jsonl(DATA), model_target())
    first = run_eval(config)
    assert first.code == 0, first.stderr
    clean_server.reset()
    again = run_eval(config, "--overwrite", output=first.output)
    assert again.code == 0, again.stderr
    assert clean_server.stats()["per_prompt"] == {row["question"]: 1 for row in DATA}
    assert again.results["usage"]["cache"] == {"hits": 0, "misses": ROWS}


def test_a_dry_run_sends_nothing_paid(clean_server, model_target, write_jsonl, run_eval) -> None:
    result = run_eval(
        config_for(write_jsonl(DATA), model_target()),
        *DATAFLOW_DRY_RUN,
    )
    assert result.code == 0, result.stderr
    assert "dry run" in result.stdout
    assert clean_server.stats()["requests"] == 0  # the free probe only
    assert not result.output.exists()


@pytest.mark.parametrize("mode", ["in_memory", "multi_processing"])
def test_a_local_dry_run_builds_the_job_and_sends_nothing(
    clean_server, model_target, write_jsonl, run_eval, mode
) -> None:
    result = run_eval(config_for(write_jsonl(DATA), model_target()), f"--direct_running_mode={mode}", "--dry_run=True")
    assert result.code == 0, result.stderr
    assert "dry run: built the FnApiRunner job" in result.stdout
    assert clean_server.stats()["requests"] == 0  # the free probe only: no row was sent
    assert not result.output.exists()


def test_an_output_the_run_would_refuse_is_refused_before_the_request(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    config = config_for(write_jsonl(DATA), model_target())
    first = run_eval(config)
    assert first.code == 0, first.stderr
    clean_server.reset()
    again = run_eval(config, output=first.output)  # neither --resume nor --overwrite
    assert again.code == 2 and "already holds outputs" in again.stderr
    assert clean_server.stats()["requests"] == 0


@pytest.mark.slow
def test_a_killed_run_resumes_without_resending_the_preflights_answer(
    clean_server, model_target, write_jsonl, run_eval, tmp_path
) -> None:
    rows = [{"question": f"question number {i}", "answer": f"question number {i}"} for i in range(600)]
    config = config_for(write_jsonl(rows), model_target())
    clean_server.configure(latency_ms=20)
    output = tmp_path / "killed"
    process = start_run(config, output, tmp_path)
    interrupt_halfway(clean_server, process, signal.SIGKILL)
    process.communicate(timeout=60)
    recorded = journaled_keys(output)
    first_prompt = rows[0]["question"]
    assert clean_server.stats()["per_prompt"][first_prompt] == 1

    clean_server.reset()
    resumed = run_eval(config, "--resume", output=output)
    assert resumed.code == 0, resumed.stderr
    per_prompt = clean_server.stats()["per_prompt"]
    assert first_prompt not in per_prompt  # sent by the first run's preflight, never again
    assert sum(per_prompt.values()) == len(rows) - len(recorded)  # only what the journal lacks, once each
    assert set(per_prompt.values()) <= {1}
    assert resumed.rows[0]["cached"] is True
    assert resumed.results["usage"]["cache"] == {"hits": len(recorded), "misses": len(rows) - len(recorded)}


def test_each_target_of_a_multi_target_run_gets_each_prompt_once(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    with ServerProcess() as other:
        config = config_for(write_jsonl(DATA), model_target())
        del config["target"]
        config["targets"] = [
            {"name": "a", **model_target()},
            {"name": "b", "model": {"url": other.base_url, "name": "test-model", "format": "openai"}},
        ]
        result = run_eval(config)
        assert result.code == 0, result.stderr
        expected = {row["question"]: 1 for row in DATA}
        assert clean_server.stats()["per_prompt"] == expected
        assert other.stats()["per_prompt"] == expected
    for name in ("a", "b"):
        results = json.loads((result.output / "targets" / name / "results.json").read_text())
        assert results["usage"]["requests"] == ROWS and results["usage"]["cache"]["hits"] == 0


def test_a_wrong_path_on_the_second_target_stops_a_multi_target_run(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    config = config_for(write_jsonl(DATA), model_target())
    del config["target"]
    wrong = {"url": f"{clean_server.root_url}/v2", "name": "test-model", "format": "openai"}
    config["targets"] = [{"name": "a", **model_target()}, {"name": "b", "model": wrong}]
    result = run_eval(config)
    assert result.code == 2, result.stderr
    assert f"POST {clean_server.root_url}/v2/chat/completions" in result.stderr
    assert clean_server.stats()["not_found"]["POST /v2/chat/completions"] == 1
    assert not (result.output / "targets").exists()


def test_with_repeats_the_preflight_answers_the_first_sample(clean_server, model_target, write_jsonl, run_eval) -> None:
    config = config_for(write_jsonl(DATA[:10]), model_target(), repeats=3, inference={"temperature": 0.7})
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert clean_server.stats()["per_prompt"] == {row["question"]: 3 for row in DATA[:10]}  # each sample once
    assert result.results["usage"]["requests"] == 30 and result.results["usage"]["cache"]["hits"] == 0


def test_an_agent_reply_the_response_path_misses_stops_the_run(clean_server, write_jsonl, run_eval) -> None:
    body = {"input": "{{ item.question }}"}
    agent = {"url": f"{clean_server.root_url}/agent", "body": body, "response_path": "$.out"}  # the reply has $.output
    config = config_for(write_jsonl(DATA), {"agent": agent})
    del config["prompt_template"]
    result = run_eval(config)
    assert result.code == 2, result.stderr
    assert f"the first row's request to the target.agent endpoint (POST {clean_server.root_url}/agent)" in result.stderr
    assert "$.out" in result.stderr and "check target.agent.response_path" in result.stderr
    assert clean_server.stats()["requests"] == 1


def test_rows_with_the_first_rows_request_are_sent_as_without_the_preflight(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    rows = [{"question": f"question {i % 3}", "answer": f"question {i % 3}"} for i in range(12)]  # 3 prompts, 4 times
    result = run_eval(config_for(write_jsonl(rows), model_target()))
    assert result.code == 0, result.stderr
    assert clean_server.stats()["per_prompt"] == {f"question {i}": 4 for i in range(3)}  # one request a row
    usage = result.results["usage"]
    assert usage["requests"] == 12 and usage["cache"] == {"hits": 0, "misses": 12}
    assert [r["cached"] for r in result.rows] == [False] * 12


def test_an_unreadable_first_record_leaves_the_preflight_the_next_row(
    clean_server, model_target, tmp_path, run_eval
) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("not json\n" + "".join(json.dumps(row) + "\n" for row in DATA[:5]))
    result = run_eval(config_for(data, model_target(), ignore_request_failure=True, max_error_rate=1.0))
    assert result.code == 0, result.stderr
    assert clean_server.stats()["per_prompt"] == {row["question"]: 1 for row in DATA[:5]}
    first = result.rows[1]  # row 0 is the unreadable line
    assert (first["row_index"], first["cached"], first["attempts"]) == (1, False, 1)
    assert result.results["usage"]["requests"] == 5


def test_a_fresh_run_hands_the_answer_over_without_the_store_join(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    """Nothing to look up: the rows go straight to the target; the preflight's row is answered there, unsent."""
    result = run_eval(config_for(write_jsonl(DATA), model_target()))
    assert result.code == 0, result.stderr
    counters = result.results["run"]["counters"]
    assert "cache_misses" not in counters and "cache_hits" not in counters  # counted only by the join's last step
    assert counters["requests"] == ROWS  # the preflight's once, the workers' ROWS - 1
    assert clean_server.stats()["per_prompt"] == {row["question"]: 1 for row in DATA}
    entries = [
        line for shard in (result.output / "_responses").glob("*.jsonl") for line in shard.read_text().splitlines()
    ]
    assert len(entries) == ROWS  # the preflight's answer journalled once, by the driver


def test_with_a_store_the_join_runs_and_the_preflights_row_is_still_this_runs_request(
    clean_server, model_target, write_jsonl, run_eval, tmp_path
) -> None:
    store = {"path": str(tmp_path / "store")}
    warm = run_eval({**config_for(write_jsonl(DATA[10:]), model_target()), "cache": store})
    assert warm.code == 0, warm.stderr
    clean_server.reset()
    result = run_eval({**config_for(write_jsonl(DATA), model_target()), "cache": store})
    assert result.code == 0, result.stderr
    assert clean_server.stats()["per_prompt"] == {row["question"]: 1 for row in DATA[:10]}  # row 0 by the preflight
    usage = result.results["usage"]
    assert usage["requests"] == 10 and usage["cache"] == {"hits": ROWS - 10, "misses": 10}
    counters = result.results["run"]["counters"]
    assert (counters["cache_hits"], counters["cache_misses"], counters["requests"]) == (ROWS - 10, 10, 10)
    first = result.rows[0]
    assert (first["row_index"], first["cached"], first["attempts"], first["status"]) == (0, False, 1, "ok")
