"""Config typos are answered with the closest key or metric type, as flags and template fields already are."""

from __future__ import annotations

from typing import Any

import pytest

from beameval.config.schema import parse_config
from beameval.core.errors import ConfigError
from beameval.core.suggest import closest

METRIC = {"type": "exact-match", "reference": "{{ item.answer }}"}
BASE: dict[str, Any] = {"dataset": {"path": "d.jsonl"}, "metrics": [METRIC]}
MODEL = {"url": "http://127.0.0.1:8000/v1", "name": "m"}


def refusal(config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as refused:
        parse_config(config)
    return refused.value.message


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {**BASE, "prompt_templat": "{{ item.q }}"},
            "unknown key 'prompt_templat' (did you mean 'prompt_template'? unknown keys are refused)",
        ),
        (
            {**BASE, "params": {"paralelism": 4}},
            "unknown key 'params.paralelism' (did you mean 'params.parallelism'? unknown keys are refused)",
        ),
        (
            {**BASE, "target": {"model": {**MODEL, "formt": "nim"}}, "prompt_template": "x"},
            "unknown key 'target.model.formt' (did you mean 'target.model.format'?",
        ),
        (
            {**BASE, "statistics": {"clusterby": "passage"}},
            "unknown key 'statistics.clusterby' (did you mean 'statistics.cluster_by'?",
        ),
        (
            {**BASE, "metrics": [METRIC, {"type": "f1", "referenc": "{{ item.answer }}"}]},
            "unknown key 'metrics.1.referenc' (did you mean 'metrics.1.reference'?",
        ),
        (  # a key of a model nested inside a metric (a judge's endpoint)
            {
                **BASE,
                "metrics": [
                    {
                        "type": "llm-judge",
                        "model": {**MODEL, "api_kye_env": "KEY"},
                        "template": {"messages": [{"role": "user", "content": "x"}]},
                        "scores": [],
                    }
                ],
            },
            "unknown key 'metrics.0.model.api_kye_env' (did you mean 'metrics.0.model.api_key_env'?",
        ),
    ],
)
def test_a_misspelt_key_names_the_key_it_resembles(config: dict[str, Any], expected: str) -> None:
    assert expected in refusal(config)


def test_a_key_like_no_other_keeps_the_plain_message() -> None:
    assert "unknown key 'zzzz' (check its spelling; unknown keys are refused)" in refusal({**BASE, "zzzz": 1})


def test_a_misspelt_metric_type_names_the_type_it_resembles() -> None:
    message = refusal({**BASE, "metrics": [{**METRIC, "type": "exact_match"}]})
    assert message.endswith(
        "unknown metric type 'exact_match'; valid types are: bleu, exact-match, f1, llm-judge, number-check, "
        "remote, retrieval-map, retrieval-mrr, retrieval-ndcg, retrieval-precision, retrieval-recall, rouge, "
        "string-check, tool-calling. Did you mean 'exact-match'?"
    )
    assert "Did you mean" not in refusal({**BASE, "metrics": [{"type": "zzzz"}]})


def test_the_cli_prints_the_suggestion_and_exits_2(write_jsonl, run_eval) -> None:
    data = write_jsonl([{"answer": "a", "output": "a"}])
    config = {"dataset": {"path": str(data)}, "metrics": [{**METRIC, "candidate": "{{ item.output }}"}]}
    result = run_eval({**config, "params": {"paralelism": 4}})
    assert result.code == 2
    assert "did you mean 'params.parallelism'?" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("word", "known", "expected"),
    [("paralelism", ["parallelism", "max_retries"], "parallelism"), ("zzzz", ["parallelism"], None)],
)
def test_closest(word: str, known: list[str], expected: str | None) -> None:
    assert closest(word, known) == expected
