"""Templates cannot change the row they read: the stored item is the input row, and mutation fails the row."""

from __future__ import annotations

import json

import pytest

from beameval.core.errors import TemplateError
from beameval.core.templates import Template


@pytest.mark.parametrize(
    "source",
    [
        "{{ item.update({'answer': item.question}) or '' }}",
        "{{ item.pop('answer') }}",
        "{{ item.setdefault('x', 1) }}",
        "{{ item.tags.append('x') }}",
        "{{ item.clear() }}",
    ],
)
def test_a_template_cannot_mutate_the_row(source):
    item = {"question": "q", "answer": "a", "tags": ["t"]}
    before = json.loads(json.dumps(item))
    with pytest.raises(TemplateError, match="blocked by the sandbox"):
        Template(source, "reference").render({"item": item, **item})
    assert item == before


@pytest.mark.slow
def test_an_update_in_a_metric_template_fails_the_rows_and_leaves_the_stored_items_alone(write_jsonl, run_eval):
    rows = [{"question": f"q{i}", "answer": "a", "output": f"q{i}"} for i in range(3)]
    data = write_jsonl(rows)
    metrics = [
        # Before the fix this rewrote every reference to the question and scored 1.0.
        {
            "type": "exact-match",
            "reference": "{{ item.update({'answer': item.question}) or item.answer }}",
            "candidate": "{{ item.output }}",
        },
        {"type": "f1", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
    ]
    config = {
        "dataset": {"path": str(data)},
        "params": {"ignore_request_failure": True, "max_error_rate": 1.0},
        "metrics": metrics,
    }
    result = run_eval(config, "--skip_preflight")  # the run itself, not the preflight, must refuse the mutation
    assert result.code == 0, result.stderr
    assert [json.loads(r["item"]) for r in result.rows] == rows
    assert all(r["status"] == "error" for r in result.rows)
    assert all("access to attribute 'update' of 'dict' object is unsafe" in e["error"] for e in result.errors)
    assert [r["f1.f1"] for r in result.rows] == [0.0, 0.0, 0.0]  # the other metric still saw answer "a"
