"""llm-judge with pairwise: true: the config's refusals, both orders' requests, and how two replies make a verdict.

No HTTP here: replies are given as the endpoint stage attaches them (tests/pipeline/test_judge_pairwise.py
runs it end to end against the test server).
"""

from __future__ import annotations

import math
from itertools import product
from typing import Any

import pytest

from beameval.config.schema import parse_config
from beameval.core.errors import ConfigError, MetricError
from beameval.core.records import EndpointReply
from beameval.metrics.base import MetricContext
from beameval.metrics.judge.pairwise import verdict
from beameval.metrics.llm_judge import LLMJudge
from beameval.metrics.registry import config_model, resolve

URL = "http://judge:8000/v1"
MODEL = {"url": URL, "name": "judge", "format": "openai"}
TARGETS = [{"name": n, "model": {"url": f"http://{n}:8000/v1", "name": n}} for n in ("base", "cand")]
PROMPT = {"messages": [{"role": "user", "content": "{{ item.question }}"}]}


def pairwise(**fields: Any) -> LLMJudge:
    data = {"type": "llm-judge", "model": MODEL, "pairwise": True, **fields}
    metric = resolve(config_model("llm-judge").model_validate(data), "duel")
    assert isinstance(metric, LLMJudge)
    return metric


def config_error(targets: list[dict[str, Any]] | None = TARGETS, **judge: Any) -> str:
    where = {"targets": targets} if targets is not None else {"target": {"model": MODEL}}
    data = {"dataset": {"path": "x.jsonl"}, "prompt_template": PROMPT, **where}
    with pytest.raises(ConfigError) as info:
        parse_config({**data, "metrics": [{"type": "llm-judge", "model": MODEL, **judge}]})
    return str(info.value)


def ctx(candidate: str, baseline: str | None, replies: tuple[str, str] | None = None) -> MetricContext:
    responses = None
    if replies is not None:
        responses = {
            "duel": EndpointReply(sample={"output_text": replies[0]}, status=200, attempts=1),
            "duel.swapped": EndpointReply(sample={"output_text": replies[1]}, status=200, attempts=1),
        }
    answer = {} if baseline is None else {"output_text": baseline}
    return MetricContext({"question": "Q"}, {"output_text": candidate}, responses, answer)


def shown(a: str, b: str) -> str:
    return f"[The start of answer A]\n{a}\n[The end of answer A]\n\n[The start of answer B]\n{b}\n[The end of answer B]"


def test_a_single_target_run_is_refused_with_what_to_do() -> None:
    message = config_error(targets=None, pairwise=True)
    assert "metric 'llm-judge' has pairwise: true" in message
    assert "needs targets: with at least two entries, the baseline first" in message
    assert "needs targets:" in config_error(targets=TARGETS[:1], pairwise=True)


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"pairwise": True, "scores": [{"name": "q", "minimum": 1, "maximum": 5}]}, "remove scores"),
        ({}, "scores is required"),
        ({"pairwise": True, "prompt_template": "Which is better? {{ sample.output_text }}"}, "{{ answer_a }}"),
        ({"pairwise": True, "calibration": {"labels": "l.jsonl"}}, "cannot be calibrated"),
    ],
)
def test_invalid_pairwise_configs(fields: dict[str, Any], fragment: str) -> None:
    assert fragment in config_error(**fields)


def test_each_row_is_asked_in_both_orders_through_two_calls() -> None:
    judge = pairwise()
    first, swapped = judge.endpoint_calls()
    assert (first.key, swapped.key) == ("duel", "duel.swapped")
    row = ctx("mine", "theirs")
    users = [call.build_request(row).body["messages"][-1]["content"] for call in (first, swapped)]
    assert users == [shown("mine", "theirs"), shown("theirs", "mine")]
    schema = first.build_request(row).body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["preference"]["enum"] == ["A", "B", "tie"]
    assert swapped.endpoint_handler() is first.endpoint_handler()  # one engine, journal, budget
    assert all(call.needs_call(row) for call in (first, swapped))
    assert not any(call.needs_call(ctx("same", "same")) for call in (first, swapped))
    assert not any(call.needs_call(ctx("mine", None)) for call in (first, swapped))


def test_a_custom_template_gets_the_answers_in_each_order() -> None:
    content = "{{ item.question }}|{{ answer_a }}|{{ answer_b }}|{{ baseline.output_text }}"
    first, swapped = pairwise(prompt_template={"messages": [{"role": "user", "content": content}]}).endpoint_calls()
    row = ctx("mine", "theirs")
    assert first.build_request(row).body["messages"][0]["content"] == "Q|mine|theirs|theirs"
    assert swapped.build_request(row).body["messages"][0]["content"] == "Q|theirs|mine|theirs"


def test_the_verdict_counts_only_when_both_orders_agree() -> None:
    as_candidate = ({"A": "win", "B": "loss", "tie": "tie"}, {"A": "loss", "B": "win", "tie": "tie"})
    for first, second in product(["A", "B", "tie"], repeat=2):
        one, two = as_candidate[0][first], as_candidate[1][second]
        assert verdict(first, second) == ((one, 0.0) if one == two else ("tie", 1.0))


@pytest.mark.parametrize(
    ("replies", "expected"),
    [
        (('{"preference": "A"}', '{"preference": "B"}'), (1.0, "win", 0.0)),
        (('{"preference": "B"}', '{"preference": "A"}'), (0.0, "loss", 0.0)),
        (('{"preference": "tie"}', '{"preference": "tie"}'), (0.5, "tie", 0.0)),
        (('{"preference": "A"}', '{"preference": "A"}'), (0.5, "tie", 1.0)),  # it prefers position one
        (('{"preference": "B"}', 'I think ```{"preference": "B"}```'), (0.5, "tie", 1.0)),  # position two
    ],
)
def test_scores_from_both_replies(replies: tuple[str, str], expected: tuple[float, str, float]) -> None:
    out = pairwise().score(ctx("mine", "theirs", replies))
    assert (out["preference"], out["preference.label"], out["position_flip"]) == expected
    assert out["nan_reason"] == ""


def test_identical_answers_are_a_tie_without_a_flip_measured() -> None:
    out = pairwise().score(ctx("same", "same"))
    assert (out["preference"], out["preference.label"]) == (0.5, "tie")
    assert math.isnan(out["position_flip"])  # not asked: no evidence either way
    assert out["nan_reason"] == "position_flip: identical answers, a tie without asking the judge"


def test_no_baseline_answer_or_an_unreadable_reply_is_nan() -> None:
    missing = pairwise().score(ctx("mine", None))
    assert math.isnan(missing["preference"]) and math.isnan(missing["position_flip"])
    assert missing["nan_reason"] == "the first target has no answer for this row"
    unreadable = pairwise().score(ctx("mine", "theirs", ('{"preference": "A"}', '{"preference": "C"}')))
    assert math.isnan(unreadable["preference"]) and unreadable["preference.label"] == ""
    assert unreadable["nan_reason"].startswith("preference (swapped order): ")


def test_a_failed_call_fails_the_row_unless_ignored() -> None:
    row = ctx("mine", "theirs", ('{"preference": "A"}', '{"preference": "B"}'))
    assert row.responses is not None
    failed = EndpointReply(error="HTTP 500", error_kind="endpoint", status=500, failure_class="server")
    row.responses = {**row.responses, "duel.swapped": failed}
    with pytest.raises(MetricError, match="the judge request failed: HTTP 500"):
        pairwise().score(row)
    out = pairwise(ignore_request_failure=True).score(row)
    assert math.isnan(out["preference"]) and "HTTP 500" in str(out["nan_reason"])
