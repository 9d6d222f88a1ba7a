"""Unit tests of the stub server's pure parts: prompt extraction, replies, fault decisions, responses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from beameval.testserver.app import format_retry_after
from beameval.testserver.faults import FaultConfig, FaultInjector, Rule
from beameval.testserver.replies import UNKNOWN_ANSWER, Replier, chat_response, prompt_text, usage
from beameval.testserver.wire import json_response


def test_prompt_text_chat_takes_last_user_message() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"},
            {"role": "assistant", "content": "pending"},
        ]
    }
    assert prompt_text("chat", body) == "second question"


def test_prompt_text_concatenates_text_parts() -> None:
    content = [
        {"type": "text", "text": "alpha "},
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
        {"type": "text", "text": "beta"},
    ]
    assert prompt_text("chat", {"messages": [{"role": "user", "content": content}]}) == "alpha beta"


def test_prompt_text_completion_agent_and_missing() -> None:
    assert prompt_text("completion", {"prompt": "once upon"}) == "once upon"
    assert prompt_text("completion", {"prompt": ["first", "second"]}) == "first"
    assert prompt_text("agent", {"input": "find it"}) == "find it"
    assert prompt_text("chat", {"messages": [{"role": "system", "content": "x"}]}) == ""
    assert prompt_text("completion", {}) == ""
    assert prompt_text("chat", ["not", "a", "dict"]) == ""


def test_usage_counts_whitespace_words() -> None:
    assert usage("a  b\nc", "one two") == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert usage("a", "") == {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1}
    assert usage("a", None)["completion_tokens"] == 0


def test_replier_modes_and_rule_override(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    records = [
        {"question": "capital of France", "model_answer": "Paris"},
        {"question": "France", "model_answer": "second match loses"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    replier = Replier.from_jsonl(path)
    assert replier.mode == "answers"
    assert replier.text("Q: what is the capital of France?") == "Paris"
    assert replier.text("Q: what is in Spain?") == UNKNOWN_ANSWER
    assert replier.text("capital of France", Rule(match="x", reply="ruled")) == "ruled"
    assert Replier().mode == "echo"
    assert Replier().text("echo me") == "echo me"


def test_replier_rejects_records_without_keys(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        Replier.from_jsonl(path)


def test_chat_response_tool_calls_are_normalized() -> None:
    calls = [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    out = chat_response({"model": "m"}, "weather in Paris", None, 7, calls)
    message = out["choices"][0]["message"]
    assert out["id"] == "chatcmpl-7"
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert message["content"] is None
    assert message["tool_calls"] == [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]


def test_fault_config_validation_and_partial_update() -> None:
    base = FaultConfig(latency_ms=5)
    updated = base.updated({"error_rate": 0.5, "rules": [{"match": "x", "reply": "y"}]})
    assert (updated.latency_ms, updated.error_rate, updated.rules[0].reply) == (5, 0.5, "y")
    assert base.error_rate == 0
    with pytest.raises(ValidationError):
        base.updated({"error_rate": 1.5})
    with pytest.raises(ValidationError):
        base.updated({"no_such_field": 1})


def test_first_matching_rule_wins() -> None:
    config = FaultConfig(rules=[Rule(match="cat", reply="first"), Rule(match="category", reply="second")])
    found = config.find_rule("a category")
    assert found is not None and found[0] == 0 and found[1].reply == "first"
    assert config.find_rule("dog") is None


def test_fail_times_counts_per_prompt() -> None:
    injector = FaultInjector(FaultConfig(error_status=502, rules=[Rule(match="flaky", fail_times=2)]))
    actions = [(o.action, o.status) for o in (injector.decide("flaky one") for _ in range(3))]
    assert actions == [("error", 502), ("error", 502), ("reply", 200)]
    assert injector.decide("flaky two").action == "error"
    injector.reset()
    assert injector.decide("flaky one").action == "error"


def test_seeded_decisions_are_reproducible() -> None:
    config = FaultConfig(error_rate=0.5, jitter_ms=10, seed=42)
    fresh = FaultInjector(config)
    run0 = [(o.action, o.delay_s) for o in (fresh.decide("p") for _ in range(30))]
    injector = FaultInjector(config)
    run1 = [(o.action, o.delay_s) for o in (injector.decide("p") for _ in range(30))]
    injector.reset()
    run2 = [(o.action, o.delay_s) for o in (injector.decide("p") for _ in range(30))]
    assert run0 == run1 == run2
    assert {a for a, _ in run1} == {"error", "reply"}
    assert all(0 <= d <= 0.010 for _, d in run1)


def test_format_retry_after() -> None:
    assert format_retry_after(2.0) == "2"
    assert format_retry_after(0.5) == "0.5"
    assert format_retry_after(0) == "0"


def test_json_response_is_compact_with_its_headers() -> None:
    response = json_response(429, {"a": [1, 2]}, {"Retry-After": "1"})
    assert (response.status, response.content_type, response.headers["Retry-After"]) == (429, "application/json", "1")
    assert response.body == b'{"a":[1,2]}'


def test_stats_busy_window_spans_first_request_to_last_answer() -> None:
    from beameval.testserver.stats import Stats

    stats = Stats()
    assert stats.snapshot()["busy_s"] is None and stats.snapshot()["first_request_at"] is None
    stats.arrived("a", {})
    stats.enter()
    stats.arrived("b", {})
    stats.leave()
    stats.answered(200)
    snap = stats.snapshot()
    assert snap["first_request_at"] is not None and snap["last_response_at"] >= snap["first_request_at"]
    assert snap["busy_s"] == snap["last_response_at"] - snap["first_request_at"]
    first, second = snap["first_request_at"], snap["second_request_at"]
    assert second is not None and first <= second <= snap["last_response_at"]
    stats.arrived("c", {})  # a later request moves neither
    assert (stats.snapshot()["first_request_at"], stats.snapshot()["second_request_at"]) == (first, second)
    stats.reset()
    assert stats.snapshot()["first_request_at"] is None and stats.snapshot()["last_response_at"] is None
    assert stats.snapshot()["second_request_at"] is None
