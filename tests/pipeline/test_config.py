import json

import pytest

from beameval.config.schema import parse_config
from beameval.core.errors import ConfigError
from pipeline.config import load_config

BASE = {"dataset": {"path": "x.jsonl"}, "metrics": [{"type": "exact-match", "reference": "{{ item.a }}"}]}
MODEL = {"url": "http://127.0.0.1:8000/v1", "name": "m"}


def with_(**changes):
    return {**BASE, **changes}


def test_defaults_match_the_reference():
    params = parse_config(BASE).params
    assert (params.parallelism, params.max_retries, params.ignore_request_failure, params.limit_samples) == (
        8,
        3,
        False,
        None,
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (with_(params={"paralelism": 3}), "unknown key 'params.paralelism'"),
        (with_(extra=1), "unknown key 'extra'"),
        (with_(params={"parallelism": 0}), "'params.parallelism': Input should be greater than or equal to 1 (got 0)"),
        (with_(params={"inference": {"temperature": 3}}), "'params.inference.temperature'"),
        (
            with_(params={"inference": {"max_tokens": 5, "max_completion_tokens": 5}}),
            "max_tokens or max_completion_tokens, not both",
        ),
        (with_(metrics=[{"type": "exact-match", "referenc": "x"}]), "unknown key 'metrics.0.referenc'"),
        (with_(metrics=[{"type": "nope"}]), "unknown metric type 'nope'; valid types are: "),
        (with_(metrics=[]), "'metrics'"),
        ({"metrics": BASE["metrics"]}, "missing required key 'dataset'"),
        (with_(target={"model": {**MODEL, "url": "ftp://x"}}, prompt_template="x"), "'target.model.url'"),
        (
            with_(target={"model": {**MODEL, "default_headers": {"X-Api-Key": "s"}}}, prompt_template="x"),
            "looks like a credential",
        ),
        (
            with_(target={"model": {**MODEL, "api_key_env": "sk-abc123!"}}, prompt_template="x"),
            "NAME of an environment",
        ),
        (with_(target={"model": MODEL}), "prompt_template is required"),
        (with_(target={}), "exactly one of target.model, target.agent or target.retrieval"),
    ],
)
def test_invalid_configs_name_the_key(data, expected):
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert expected in str(info.value)


def test_unknown_inference_params_pass_through():
    config = parse_config(with_(params={"inference": {"temperature": 0, "seed": 7, "extra_body": {"nvext": {"a": 1}}}}))
    assert config.params.inference.as_request_params() == {
        "temperature": 0,
        "seed": 7,
        "extra_body": {"nvext": {"a": 1}},
    }


def test_yaml_and_json_files_load_the_same(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps(BASE))
    (tmp_path / "c.yaml").write_text(
        "dataset: {path: x.jsonl}\nmetrics:\n  - {type: exact-match, reference: '{{ item.a }}'}\n"
    )
    assert load_config(str(tmp_path / "c.json")) == load_config(str(tmp_path / "c.yaml"))


def test_unreadable_and_unparseable_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(str(tmp_path / "missing.yaml"))
    (tmp_path / "bad.yaml").write_text("dataset: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML/JSON"):
        load_config(str(tmp_path / "bad.yaml"))


def test_public_dump_never_holds_headers_or_keys():
    config = parse_config(
        with_(
            target={"model": {**MODEL, "api_key_env": "MY_KEY", "default_headers": {"X-Team": "a"}}},
            prompt_template="x",
        )
    )
    dumped = json.dumps(config.public_dump())
    assert "X-Team" not in dumped and "MY_KEY" in dumped
