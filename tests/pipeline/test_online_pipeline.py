"""The whole graph online: Beam's local runner, real HTTP to the project's test server."""

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QA = [json.loads(line) for line in (ROOT / "data" / "sample_qa.jsonl").read_text().splitlines()]
ANSWERS = {
    json.loads(line)["question"]: json.loads(line)["model_answer"]
    for line in (ROOT / "data" / "sample_model_answers.jsonl").read_text().splitlines()
}
METRICS = [
    {"type": "exact-match", "reference": "{{ item.answer }}"},
    {"type": "f1", "reference": "{{ item.answer }}"},
    {
        "type": "string-check",
        "left_template": "{{ sample.output_text }}",
        "operation": "contains",
        "right_template": "{{ item.answer }}",
    },
]


def online_config(path, target, **params):
    return {
        "dataset": {"path": str(path)},
        "target": target,
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 8, "max_retries": 2, **params},
        "metrics": METRICS,
    }


def scripted(server):
    """Make the server answer each sample question with its scripted model answer."""
    server.configure(rules=[{"match": q, "reply": a} for q, a in ANSWERS.items()])


def test_online_run_scores_exactly_and_sends_one_request_per_row(clean_server, model_target, write_jsonl, run_eval):
    scripted(clean_server)
    result = run_eval(online_config(write_jsonl(QA), model_target()))
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 40, "ok": 40, "errors": 0}
    em = result.score("exact-match.exact-match")
    assert (em["count"], em["nan_count"], em["sum"]) == (40, 0, 29.0)
    assert result.score("string-check.string-check")["sum"] == 29.0
    stats = clean_server.stats()
    assert stats["requests"] == 40 and set(stats["per_prompt"].values()) == {1}  # 3 metrics, 1 call per row
    rows = result.rows
    assert [r["row_index"] for r in rows] == list(range(40))
    assert rows[0]["output_text"] == ANSWERS[QA[0]["question"]]
    assert all(r["attempts"] == 1 and r["http_status"] == 200 and r["latency_ms"] > 0 for r in rows)
    assert all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 and len(r["request_hash"]) == 64 for r in rows)
    counters = result.results["run"]["counters"]  # Beam metrics, queried after the run
    assert (counters["rows_read"], counters["requests"], counters["rows_scored"], counters["retries"]) == (
        40,
        40,
        40,
        0,
    )
    assert counters.get("limit_decreases", 0) == 0  # a healthy endpoint: AIMD never backed off
    gauges = result.results["run"]["gauges"]
    parallelism = result.results["config"]["params"]["parallelism"]
    assert gauges["concurrency_limit"] == parallelism and 1 <= gauges["peak_in_flight"] <= parallelism
    usage = result.results["usage"]
    assert usage["requests"] == 40 and usage["prompt_tokens"] == sum(r["prompt_tokens"] for r in rows)


def test_offline_scores_equal_online_scores_when_outputs_match(clean_server, model_target, write_jsonl, run_eval):
    scripted(clean_server)
    online = run_eval(online_config(write_jsonl(QA, "qa.jsonl"), model_target()))
    with_outputs = [{**row, "output": ANSWERS[row["question"]]} for row in QA]
    offline_metrics = [{**m, "candidate": "{{ item.output }}"} for m in METRICS[:2]]
    offline_metrics.append({**METRICS[2], "left_template": "{{ item.output }}"})
    offline = run_eval({"dataset": {"path": str(write_jsonl(with_outputs, "out.jsonl"))}, "metrics": offline_metrics})
    assert online.code == offline.code == 0
    assert online.results["aggregate_scores"] == offline.results["aggregate_scores"]


def test_server_errors_for_some_rows_become_nan_rows(clean_server, model_target, write_jsonl, run_eval):
    scripted(clean_server)
    failing = [QA[3]["question"], QA[7]["question"]]
    clean_server.configure(
        rules=[{"match": q, "status": 400} for q in failing] + [{"match": q, "reply": a} for q, a in ANSWERS.items()]
    )
    result = run_eval(online_config(write_jsonl(QA), model_target(), ignore_request_failure=True))
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 40, "ok": 38, "errors": 2}
    em = result.score("exact-match.exact-match")
    assert (em["count"], em["nan_count"]) == (38, 2)
    errors = result.errors
    assert [(e["row_index"], e["phase"], e["http_status"]) for e in errors] == [
        (3, "sample_generation", 400),
        (7, "sample_generation", 400),
    ]
    assert "400" in errors[0]["error"]
    assert all(math.isnan(result.rows[i]["f1.f1"]) for i in (3, 7))
    assert clean_server.stats()["per_prompt"][failing[0]] == 1  # a 400 is not retried


def test_strict_mode_stops_with_the_first_failing_row(clean_server, model_target, write_jsonl, run_eval):
    clean_server.configure(rules=[{"match": QA[5]["question"], "status": 503, "retry_after": 0}])
    result = run_eval(online_config(write_jsonl(QA), model_target(), max_retries=1))
    assert result.code == 1
    assert "on row 5" in result.stderr and "503" in result.stderr and "sample generation" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (result.output / "results.json").exists()
    assert clean_server.stats()["per_prompt"][QA[5]["question"]] == 2  # max_retries + 1 attempts


@pytest.mark.parametrize("prompt_field", ["question"])
def test_missing_prompt_field_is_a_generation_failure(clean_server, model_target, write_jsonl, run_eval, prompt_field):
    rows = [*QA[:3], {"id": "x", "answer": "a"}]
    result = run_eval(online_config(write_jsonl(rows), model_target(), ignore_request_failure=True), "--skip_preflight")
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 4, "ok": 3, "errors": 1}
    error = result.errors[0]
    assert error["row_index"] == 3 and error["phase"] == "sample_generation"
    assert f"'{prompt_field}'" in error["error"] and "item keys: ['answer', 'id']" in error["error"]
    assert clean_server.stats()["requests"] == 3


def test_strict_mode_stops_sending_after_the_first_failure(clean_server, model_target, write_jsonl, run_eval):
    clean_server.configure(error_rate=1.0, error_status=401, latency_ms=5)
    rows = [{"question": f"question {i}", "answer": "a"} for i in range(300)]
    # The run's strict mode, not the preflight (whose first request would stop it: test_preflight_request.py).
    result = run_eval(online_config(write_jsonl(rows), model_target(), parallelism=4), "--skip_preflight")
    assert result.code == 1
    sent = clean_server.stats()["requests"]
    assert sent < 50, f"{sent} requests sent to an endpoint that refused the first"
    assert "401" in result.stderr and f"{300 - sent} of them not sent" in result.stderr
    assert len(result.rows) == 300 and len(result.errors) == 300
    not_sent = [e for e in result.errors if e["error"].startswith("not sent")]
    assert len(not_sent) == 300 - sent


def test_preflight_rejects_bad_credentials_and_unset_key_variables(
    clean_server, model_target, write_jsonl, run_eval, monkeypatch
):
    clean_server.configure(api_key="right-key")
    config = online_config(write_jsonl(QA[:3]), model_target(api_key_env="EVAL_PREFLIGHT_KEY"))
    monkeypatch.delenv("EVAL_PREFLIGHT_KEY", raising=False)
    unset = run_eval(config)
    assert unset.code == 2 and "'EVAL_PREFLIGHT_KEY', but it is not set" in unset.stderr
    monkeypatch.setenv("EVAL_PREFLIGHT_KEY", "wrong-key")
    wrong = run_eval(config)
    assert wrong.code == 2 and "rejected the credentials (HTTP 401)" in wrong.stderr
    assert "wrong-key" not in wrong.stderr and clean_server.stats()["requests"] == 0
    monkeypatch.setenv("EVAL_PREFLIGHT_KEY", "right-key")
    right = run_eval(config)
    assert right.code == 0, right.stderr
    assert right.results["counts"]["ok"] == 3


def test_agent_target_answers_by_jsonpath_and_keeps_the_trajectory(clean_server, write_jsonl, run_eval):
    scripted(clean_server)
    config = {
        "dataset": {"path": str(write_jsonl(QA[:6]))},
        "target": {
            "agent": {
                "url": f"{clean_server.root_url}/agent",
                "body": {"input": "{{ item.question }}"},
                "response_path": "$.output",
                "trajectory_path": "$.trajectory",
            }
        },
        "metrics": [
            METRICS[0],
            {
                "type": "string-check",
                "left_template": "{{ sample.trajectory[0].tool }}",
                "operation": "equals",
                "right_template": "search",
            },
        ],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert result.score("exact-match.exact-match")["sum"] == 5.0  # only Sydney != Canberra
    assert result.score("string-check.string-check")["sum"] == 6.0
    assert [r["output_text"] for r in result.rows] == [ANSWERS[row["question"]] for row in QA[:6]]
    assert clean_server.stats()["requests"] == 6
    assert set(clean_server.last_request()["body"]) == {"input"}


def test_each_run_in_a_process_starts_with_a_fresh_engine(clean_server, model_target, write_jsonl, run_eval):
    """The peak-in-flight gauge is the limiter's own: a reused engine would report the previous run's peak."""
    scripted(clean_server)
    clean_server.configure(latency_ms=50)
    busy = run_eval(online_config(write_jsonl(QA, "all.jsonl"), model_target()))
    # One row, sent by the engine (the preflight would answer it, and the engine would send nothing).
    single = run_eval(online_config(write_jsonl(QA[:1], "one.jsonl"), model_target()), "--skip_preflight")
    assert busy.code == 0 and single.code == 0, busy.stderr + single.stderr
    assert busy.results["run"]["gauges"]["peak_in_flight"] == 8  # 40 rows at parallelism 8
    assert single.results["run"]["gauges"]["peak_in_flight"] == 1


def test_rows_record_the_request_as_sent_fresh_and_from_the_store(clean_server, model_target, write_jsonl, run_eval):
    """The ``request`` column (the report's transcript) holds the body sent, the same when answered from the store."""
    scripted(clean_server)
    config = online_config(write_jsonl(QA[:6]), model_target())
    config["prompt_template"]["messages"].insert(0, {"role": "system", "content": "Answer in two words."})
    config["cache"] = {"path": str(Path(config["dataset"]["path"]).parent / "store")}
    fresh = run_eval(config)
    assert fresh.code == 0, fresh.stderr
    cached = run_eval(config, output=fresh.output.parent / "cached")
    assert cached.code == 0, cached.stderr
    assert clean_server.stats()["requests"] == 6  # the rerun sent nothing
    for rows in (fresh.rows, cached.rows):
        for row, item in zip(rows, QA[:6], strict=True):
            sent = json.loads(row["request"])
            assert sent["messages"] == [
                {"role": "system", "content": "Answer in two words."},
                {"role": "user", "content": item["question"]},
            ]
            assert sent["model"] == config["target"]["model"]["name"]
    assert [r["request"] for r in fresh.rows] == [r["request"] for r in cached.rows]
    assert all(r["cached"] for r in cached.rows)
