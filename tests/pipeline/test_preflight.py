"""The preflight finds config mistakes before any paid request: every template, every endpoint."""

from __future__ import annotations

import asyncio
import random

import pytest

from beameval.config import ModelTarget, Params, TargetConfig
from beameval.core.template_fields import item_fields, missing_fields
from beameval.inference.probe import probe
from beameval.inference.targets import make_handler
from beameval.testserver.harness import free_port
from beameval.testserver.scripted import ScriptedServer, Step, reply

QA = [{"question": f"question {i}", "answer": f"question {i}"} for i in range(200)]
PROMPT = {"messages": [{"role": "user", "content": "{{ item.question }}"}]}


def online(path, target, metrics, **params):
    return {"dataset": {"path": str(path)}, "target": target, "prompt_template": PROMPT,
            "params": params, "metrics": metrics}  # fmt: skip


@pytest.mark.parametrize("lenient", [False, True])
def test_a_metric_template_typo_stops_the_run_before_any_request(
    clean_server, model_target, write_jsonl, run_eval, lenient
) -> None:
    metrics = [{"type": "exact-match", "reference": "{{ item.answr }}"}]
    result = run_eval(online(write_jsonl(QA), model_target(), metrics, ignore_request_failure=lenient))
    assert result.code == 2
    assert "metrics.0.reference reads item.answr, which none of the first 20 row(s) has" in result.stderr
    assert "(did you mean item.answer?)" in result.stderr and "the rows have: answer, question" in result.stderr
    assert clean_server.stats()["requests"] == 0 and not result.output.exists()


def test_a_prompt_typo_in_lenient_mode_is_an_error_too(clean_server, model_target, write_jsonl, run_eval) -> None:
    config = online(write_jsonl(QA), model_target(), [{"type": "f1", "reference": "{{ item.answer }}"}],
                    ignore_request_failure=True)  # fmt: skip
    config["prompt_template"] = {"messages": [{"role": "user", "content": "{{ item['questoin'] }}"}]}
    result = run_eval(config)
    assert result.code == 2 and "prompt_template.messages.0.content reads item.questoin" in result.stderr
    assert clean_server.stats()["requests"] == 0


def test_a_field_only_some_rows_have_is_not_a_typo(clean_server, model_target, write_jsonl, run_eval) -> None:
    rows = [{**row, **({"hint": "h"} if i % 5 == 0 else {})} for i, row in enumerate(QA[:20])]
    metrics = [{"type": "exact-match", "reference": "{{ item.answer }}{{ item.hint if item.hint else '' }}"}]
    result = run_eval(
        online(write_jsonl(rows), model_target(), metrics, ignore_request_failure=True, max_error_rate=1.0)
    )
    assert result.code == 0, result.stderr


def test_a_judge_endpoint_that_is_down_stops_the_run(clean_server, model_target, write_jsonl, run_eval) -> None:
    port = free_port()
    judge = {
        "type": "llm-judge",
        "model": {"url": f"http://127.0.0.1:{port}/v1", "name": "judge", "format": "openai"},
        "scores": [{"name": "ok", "minimum": 0, "maximum": 1}],
        "prompt_template": {"messages": [{"role": "user", "content": "{{ sample.output_text }}"}]},
    }
    result = run_eval(online(write_jsonl(QA[:5]), model_target(), [judge]))
    assert result.code == 2
    assert f"cannot reach the endpoint at 127.0.0.1:{port}: the connection was refused" in result.stderr
    assert "metric 'llm-judge'" in result.stderr
    assert clean_server.stats()["requests"] == 0


def test_the_probe_retries_a_429_and_honours_retry_after() -> None:
    target = TargetConfig(model=ModelTarget(url="http://127.0.0.1:1/v1", name="m", format="openai"))
    handler = make_handler(target, Params(), None)
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    async def main():
        steps = [Step(reply(429, b"slow down", {"Retry-After": "3"})), Step(reply(200, b'{"data": []}'))]
        async with ScriptedServer(steps) as server:
            return await probe(handler, server.url("/v1/models"), rng=random.Random(0), sleep=no_sleep)

    result = asyncio.run(main())
    assert (result.status, result.failure, result.attempts) == (200, None, 2)
    assert len(waits) == 1 and waits[0] >= 3.0


def test_item_fields_are_found_in_every_template_shape() -> None:
    config = {
        "prompt_template": {"messages": [{"content": "{{ item.question }} {{ item['context'] }}"}]},
        "metrics": [{"references": ["{{ item.answer }}", "{% if item.alt %}{{ item.alt }}{% endif %}"]}],
        "other": "plain text, no template",
    }
    found = {(use.where, use.field) for use in item_fields(config)}
    assert found == {
        ("prompt_template.messages.0.content", "question"),
        ("prompt_template.messages.0.content", "context"),
        ("metrics.0.references.0", "answer"),
        ("metrics.0.references.1", "alt"),
    }
    assert missing_fields(item_fields(config), [{"question": 1, "context": 2, "answer": 3}]) == [
        "metrics.0.references.1 reads item.alt, which none of the first 1 row(s) has; "
        "the rows have: answer, context, question"
    ]
