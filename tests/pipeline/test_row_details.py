"""rows/ keeps what a person needs to debug a row: its id, the judge's reply, the predicted tool calls."""

from __future__ import annotations

import json

TOOL_RESPONSE = {
    "choices": [
        {"message": {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}
        ]}}
    ]
}  # fmt: skip


def test_id_column_and_predicted_calls_offline(write_jsonl, run_eval) -> None:
    reference = [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]
    rows = [{"qid": f"q-{i}", "response": TOOL_RESPONSE, "expected": reference} for i in range(3)]
    config = {
        "dataset": {"path": str(write_jsonl(rows)), "id_field": "qid"},
        "metrics": [{"type": "tool-calling", "reference": "{{ item.expected | tojson }}"}],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert [row["id"] for row in result.rows] == ["q-0", "q-1", "q-2"]
    predicted = json.loads(result.rows[0]["tool-calling.predicted_calls"])
    assert predicted == [{"name": "get_weather", "arguments": {"city": "Oslo"}}]
    assert result.rows[0]["tool-calling.function_name_and_args_accuracy"] == 1.0


def test_the_judges_reply_is_kept_per_row(clean_server, model_target, write_jsonl, run_eval) -> None:
    judge = {
        "type": "llm-judge",
        "name": "quality",
        "model": {"url": clean_server.base_url, "name": "judge", "format": "openai"},
        "scores": [{"name": "score", "minimum": 0, "maximum": 10}],
        "prompt_template": {"messages": [{"role": "user", "content": "Rate 7: {{ sample.output_text }}"}]},
    }
    config = {
        "dataset": {"path": str(write_jsonl([{"question": "hello"}]))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "metrics": [judge],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    reply = json.loads(result.rows[0]["quality.reply"])
    assert reply["text"] == "Rate 7: hello"  # the test server echoes the prompt
