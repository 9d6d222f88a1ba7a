"""results.json's config reproduces the run: every field of every metric, and no secret."""

from __future__ import annotations

ROWS = [{"question": "q", "output": "4 apples", "answer": "4"}]


def test_every_metric_field_is_in_results_config(write_jsonl, run_eval) -> None:
    metrics = [
        {"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
        {
            "type": "number-check",
            "left_template": "{{ item.output }}",
            "operation": "equals",
            "right_template": "{{ item.answer }}",
        },
        {
            "type": "string-check",
            "left_template": "{{ item.output }}",
            "operation": "contains",
            "right_template": "apples",
        },
    ]
    result = run_eval({"dataset": {"path": str(write_jsonl(ROWS))}, "metrics": metrics})
    assert result.code == 0, result.stderr
    dumped = result.results["config"]["metrics"]
    assert dumped[0]["reference"] == "{{ item.answer }}" and dumped[0]["candidate"] == "{{ item.output }}"
    assert dumped[1]["operation"] == "equals" and dumped[1]["right_template"] == "{{ item.answer }}"
    assert dumped[2]["operation"] == "contains" and dumped[2]["right_template"] == "apples"


def test_header_values_never_reach_results(clean_server, model_target, write_jsonl, run_eval) -> None:
    config = {
        "dataset": {"path": str(write_jsonl(ROWS))},
        "target": model_target(default_headers={"X-Team": "very-private-value"}),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert "default_headers" not in result.results["config"]["target"]["model"]
    assert "very-private-value" not in (result.output / "results.json").read_text()
