"""CallMetricEndpoints + ScoreRows on Beam's direct runner against the test server, with scripted judge replies."""

from __future__ import annotations

import json
import math
import pickle
import threading
from typing import Any

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beameval.core.records import EndpointReply, GeneratedRow, RowFailure, ScoredRow
from beameval.inference.outcome import Outcome
from beameval.metrics.base import MetricConfig
from beameval.metrics.registry import config_model
from beameval.testserver.harness import ServerProcess
from transforms.async_calls import PendingCalls
from transforms.metric_calls import CallMetricEndpoints, needs_metric_calls, reply_from_outcome
from transforms.score import ERRORS, ScoreRows

SCORES = [
    {"name": "quality", "minimum": 1, "maximum": 5},
    {"name": "tone", "rubric": [{"label": "formal", "value": 1}, {"label": "casual", "value": 0}]},
]


def configs(*entries: dict[str, Any]) -> list[MetricConfig]:
    return [config_model(entry["type"]).model_validate(entry) for entry in entries]


def judge(clean_server: ServerProcess, **fields: Any) -> dict[str, Any]:
    model = {"url": clean_server.base_url, "name": "judge", "format": "openai"}
    return {"type": "llm-judge", "model": model, "scores": SCORES, **fields}  # ``model`` in fields wins


def online(index: int, answer: str) -> GeneratedRow:
    return GeneratedRow(index, {"id": index, "question": f"q{index}"}, {"output_text": answer})


def plain(value: Any) -> Any:
    """NaN-free form for comparisons: NaN becomes the string "nan"."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def labels(tone: str, reason: str = "") -> dict[str, str]:
    return {"llm-judge.tone.label": tone, "llm-judge.nan_reason": reason}


def summary(row: ScoredRow) -> tuple[int, dict[str, Any], dict[str, str], str | None]:
    return row.row_index, plain(row.scores), dict(row.labels), None if row.failure is None else row.failure.text


def run(rows: list[GeneratedRow], metric_configs: list[MetricConfig], expected: list[Any], errors: list[Any]) -> None:
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        scored = (
            pipeline
            | beam.Create(rows)
            | "Call" >> beam.ParDo(CallMetricEndpoints(metric_configs))
            | "Score" >> beam.ParDo(ScoreRows(metric_configs)).with_outputs(ERRORS, main="rows")
        )
        assert_that(scored.rows | beam.Map(summary), equal_to(expected), label="Rows")
        error_rows = scored[ERRORS] | beam.Map(lambda text: (json.loads(text)["row_index"], json.loads(text)["metric"]))
        assert_that(error_rows, equal_to(errors), label="Errors")


def test_only_endpoint_metrics_need_the_stage(clean_server: ServerProcess) -> None:
    assert needs_metric_calls(configs(judge(clean_server), {"type": "exact-match", "reference": "x"}))
    assert not needs_metric_calls(configs({"type": "exact-match", "reference": "x"}))


def test_judge_scores_each_row_from_its_scripted_reply(clean_server: ServerProcess) -> None:
    clean_server.configure(
        rules=[
            {"match": "answer-A", "reply": '{"quality": 4, "tone": "formal"}'},
            {"match": "answer-B", "reply": 'Verdict:\n```json\n{"quality": 2, "tone": "casual"}\n```'},
            {"match": "answer-C", "reply": 'I would say {"quality": 9, "tone": "snarky"} overall.'},
            {"match": "answer-D", "reply": "No idea, sorry."},
        ]
    )
    rows = [online(0, "answer-A"), online(1, "answer-B"), online(2, "answer-C"), online(3, "answer-D")]
    failed = GeneratedRow(4, {"id": 4}, {}, failure=RowFailure("sample_generation", ["row 4 failed inference: x"]))
    expected = [
        (0, {"llm-judge.quality": 4.0, "llm-judge.tone": 1.0}, labels("formal"), None),
        (1, {"llm-judge.quality": 2.0, "llm-judge.tone": 0.0}, labels("casual"), None),
        (
            2,
            {"llm-judge.quality": "nan", "llm-judge.tone": "nan"},
            {
                "llm-judge.tone.label": "",
                "llm-judge.nan_reason": "quality: the value is outside [1, 5]; "
                "tone: the label is not one of the rubric's labels",
            },
            None,
        ),
        (
            3,
            {"llm-judge.quality": "nan", "llm-judge.tone": "nan"},
            {
                "llm-judge.tone.label": "",
                "llm-judge.nan_reason": "quality: no JSON object found in the reply; "
                "tone: no JSON object found in the reply",
            },
            None,
        ),
        (4, {"llm-judge.quality": "nan", "llm-judge.tone": "nan"}, {}, "row 4 failed inference: x"),
    ]
    run([*rows, failed], configs(judge(clean_server)), expected, [(4, None)])
    stats = clean_server.stats()
    assert stats["requests"] == 4  # exactly one judge request per row, none for the failed row
    assert sorted(stats["per_prompt"].values()) == [1, 1, 1, 1]
    body = clean_server.last_request()["body"]
    assert body["max_tokens"] == 1024
    assert body["response_format"]["json_schema"]["schema"]["properties"]["tone"]["enum"] == ["formal", "casual"]


def test_judge_failures_offline_rows_and_a_remote_scorer_on_the_same_rows(clean_server: ServerProcess) -> None:
    clean_server.configure(
        rules=[
            {"match": "remote 0", "reply": "0.5"},
            {"match": "remote 1", "reply": "0.25"},
            {"match": "remote 2", "reply": "1"},
            {"match": '"id": 0', "reply": '{"quality": 5, "tone": "formal"}'},
            {"match": '"id": 1', "status": 400},
            {"match": '"id": 2', "status": 503},
        ]
    )
    # Offline rows (no target, empty sample): the default prompt shows the whole row.
    rows = [GeneratedRow(i, {"id": i, "text": f"t{i}"}, {}) for i in range(3)]
    rows.append(GeneratedRow(3, {"text": "no id"}, {}))  # the remote body template fails on this row
    strict = judge(clean_server, max_retries=1)
    other_model = {"url": clean_server.base_url, "name": "judge-b", "format": "openai"}
    lenient = judge(clean_server, max_retries=1, ignore_request_failure=True, model=other_model)
    scorer = {
        "type": "remote",
        "url": f"{clean_server.root_url}/agent",
        "body": {"input": "remote {{ item.id }}"},
        "scores": [{"name": "score", "json_path": "$.output"}],
        "max_retries": 0,
    }
    metric_configs = configs(strict, lenient, scorer)
    no_keys = "quality: the reply's JSON has no value for 'quality'; tone: the reply's JSON has no value for 'tone'"
    expected_scores = {
        0: (5.0, 1.0, 5.0, 1.0, 0.5),
        1: ("nan", "nan", "nan", "nan", 0.25),
        2: ("nan", "nan", "nan", "nan", 1.0),
        3: ("nan", "nan", "nan", "nan", "nan"),
    }
    expected_labels = {
        0: ("formal", "", "formal", ""),
        1: (None, None, "", "the judge request failed (fatal, HTTP 400) and was ignored"),
        2: (None, None, "", "the judge request failed (hard_overload, HTTP 503) and was ignored"),
        # the clean_server echoes the prompt (the row as JSON) without a rule: a JSON object without the scores
        3: ("", no_keys, "", no_keys),
    }
    expected_errors = {
        0: None,
        1: [
            "metric 'llm-judge': the judge request failed: HTTP 400",
            "injected fault: HTTP 400",
            "Set ignore_request_failure: true on the judge",
        ],
        2: ["metric 'llm-judge': the judge request failed: request failed after 2 attempts: HTTP 503"],
        3: ["metric 'remote': template 'body' references a field the row does not have: 'id'"],
    }
    score_names = ["llm-judge.quality", "llm-judge.tone", "llm-judge_2.quality", "llm-judge_2.tone", "remote.score"]
    label_names = ["llm-judge.tone.label", "llm-judge.nan_reason", "llm-judge_2.tone.label", "llm-judge_2.nan_reason"]

    def matcher(actual: list[Any]) -> None:
        assert sorted(row[0] for row in actual) == [0, 1, 2, 3]
        for index, scores, labels, error in actual:
            assert tuple(scores[name] for name in score_names) == expected_scores[index], index
            assert tuple(labels.get(name) for name in label_names) == expected_labels[index], index
            if expected_errors[index] is None:
                assert error is None
            else:
                assert error is not None and error.count("metric '") == 1, error
                for fragment in expected_errors[index]:
                    assert fragment in error, (fragment, error)

    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        scored = (
            pipeline
            | beam.Create(rows)
            | "Call" >> beam.ParDo(CallMetricEndpoints(metric_configs))
            | "Score" >> beam.ParDo(ScoreRows(metric_configs)).with_outputs(ERRORS, main="rows")
        )
        assert_that(scored.rows | beam.Map(summary), matcher, label="Rows")
        error_rows = scored[ERRORS] | beam.Map(lambda text: (json.loads(text)["row_index"], json.loads(text)["metric"]))
        assert_that(error_rows, equal_to([(1, "llm-judge"), (2, "llm-judge"), (3, "remote")]), label="Errors")

    stats = clean_server.stats()
    # judges: rows 0 and 3 once each, row 1 once (400 is final), row 2 twice (503, one retry), per judge;
    # remote: rows 0-2 once each (row 3's body could not be built).
    assert stats["requests"] == 2 * (1 + 1 + 1 + 2) + 3
    assert stats["by_status"] == {"200": 2 * 2 + 3, "400": 2, "503": 4}


def test_pending_calls_emit_as_completed_and_wait_on_request() -> None:
    pending: PendingCalls[str] = PendingCalls(max_pending=2)
    first = pending.add("a")
    assert not pending.full and list(pending.drain()) == []
    second = pending.add("b")
    assert pending.full and pending.in_flight == 2
    done = Outcome({"output_text": "x"}, None, 200, 1, 0.01, "h")
    second(done)
    assert list(pending.drain()) == [("b", done)]
    threading.Timer(0.05, first, (done,)).start()  # completed from another thread, as the engine's loop does
    assert list(pending.drain(block=True, until_empty=True)) == [("a", done)]
    assert pending.in_flight == 0 and list(pending.drain(block=True)) == []


def test_rows_with_replies_survive_pickling() -> None:
    sample = {"output_text": "x", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}  # counts read from usage
    ok = reply_from_outcome(Outcome(sample, None, 200, 1, 0.5, "h", 3, 4))
    assert (ok.sample, ok.error, ok.prompt_tokens, ok.completion_tokens) == (sample, None, 3, 4)
    failed = EndpointReply(error="boom", error_kind="endpoint", status=500, attempts=4, failure_class="transient")
    row = GeneratedRow(0, {"a": 1}, {"output_text": "y"}, metric_responses={"llm-judge": ok, "remote": failed})
    assert pickle.loads(pickle.dumps(row)) == row
