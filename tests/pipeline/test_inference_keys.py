"""Request parameters: typos are refused with the key meant, stream is refused, extras go under extra_body."""

from __future__ import annotations

import pytest

from beameval.config.schema import parse_config
from beameval.core.errors import ConfigError

BASE = {
    "dataset": {"path": "data.jsonl"},
    "target": {"model": {"url": "http://127.0.0.1:1/v1", "name": "m", "format": "openai"}},
    "prompt_template": {"messages": [{"role": "user", "content": "{{ item.q }}"}]},
    "metrics": [{"type": "exact-match", "reference": "{{ item.a }}"}],
}
JUDGE = {
    "type": "llm-judge",
    "model": {"url": "http://127.0.0.1:1/v1", "name": "judge", "format": "openai"},
    "scores": [{"name": "ok", "minimum": 0, "maximum": 1}],
    "prompt_template": {"messages": [{"role": "user", "content": "{{ sample.output_text }}"}]},
}


@pytest.mark.parametrize(
    ("typo", "meant"), [("max_token", "max_tokens"), ("temprature", "temperature"), ("top_pp", "top_p")]
)
def test_a_misspelt_request_parameter_names_the_one_meant(typo: str, meant: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({**BASE, "params": {"inference": {typo: 1}}})
    assert f"'params.inference': unknown request parameter '{typo}': did you mean '{meant}'?" in refused.value.message


def test_the_same_holds_for_a_judge() -> None:
    judge = {**JUDGE, "inference": {"max_token": 10}}
    with pytest.raises(ConfigError) as refused:
        parse_config({**BASE, "metrics": [judge]})
    assert "unknown request parameter 'max_token': did you mean 'max_tokens'?" in refused.value.message


def test_stream_is_refused_and_stream_false_is_dropped() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({**BASE, "params": {"inference": {"stream": True}}})
    assert "stream: true is not supported" in refused.value.message
    config = parse_config({**BASE, "params": {"inference": {"stream": False, "max_tokens": 5}}})
    assert config.params.inference is not None
    assert config.params.inference.as_request_params() == {"max_tokens": 5}


def test_types_are_checked_and_extras_pass_through() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({**BASE, "params": {"inference": {"max_tokens": "many"}}})
    assert "'params.inference.max_tokens'" in refused.value.message
    config = parse_config(
        {**BASE, "params": {"inference": {"top_k": 5, "vendor_knob": 1, "extra_body": {"max_token": 3}}}}
    )
    assert config.params.inference is not None
    assert config.params.inference.as_request_params() == {
        "top_k": 5,
        "vendor_knob": 1,
        "extra_body": {"max_token": 3},
    }


def test_extra_body_reaches_the_endpoint_merged(clean_server, model_target, write_jsonl, run_eval) -> None:
    config = {
        **BASE,
        "dataset": {"path": str(write_jsonl([{"q": "hello", "a": "hello"}]))},
        "target": model_target(),
        "params": {"inference": {"max_tokens": 7, "extra_body": {"max_token": 3, "nvext": {"x": 1}}}},
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    body = clean_server.last_request()["body"]
    assert body["max_tokens"] == 7 and body["max_token"] == 3 and body["nvext"] == {"x": 1}
    assert "extra_body" not in body
