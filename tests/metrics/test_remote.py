"""remote: config, request body, score extraction, and real calls to the test server's /agent endpoint."""

from __future__ import annotations

import math
from typing import Any

import pytest

from beameval.config.schema import parse_config
from beameval.core.errors import ConfigError, MetricError
from beameval.core.records import EndpointReply
from beameval.inference.engine import InferenceEngine
from beameval.metrics.base import EndpointMetric, MetricContext
from beameval.metrics.registry import config_model, resolve
from beameval.metrics.remote import RemoteMetric
from transforms.metric_calls import reply_from_outcome

BODY = {"input": "{{ sample.output_text }}", "question": "{{ item.question }}", "n": "{{ item.n }}", "fixed": 1}


def remote(**fields: Any) -> RemoteMetric:
    data = {"type": "remote", "url": "http://scorer:9000/score", "body": BODY, "scores": [{"name": "score"}], **fields}
    metric = resolve(config_model("remote").model_validate(data), "remote")
    assert isinstance(metric, RemoteMetric)
    return metric


def score_of(metric: RemoteMetric, response: Any) -> dict[str, float]:
    reply = EndpointReply(sample={"response": response}, status=200, attempts=1)
    return metric.score(MetricContext({}, {}, {metric.key: reply}))


def config_error(**fields: Any) -> str:
    entry = {"type": "remote", "url": "http://scorer/score", "body": BODY, "scores": [{"name": "s"}], **fields}
    with pytest.raises(ConfigError) as info:
        parse_config({"dataset": {"path": "x.jsonl"}, "metrics": [entry]})
    return str(info.value)


def test_defaults_and_outputs() -> None:
    metric = remote(scores=[{"name": "a"}, {"name": "b", "json_path": "$.result.b", "minimum": 0, "maximum": 1}])
    assert isinstance(metric, EndpointMetric)
    assert metric.output_names() == ["a", "b"]
    assert tuple(metric.endpoint_settings) == (8, 3, 30.0)
    assert tuple(remote(timeout_seconds=5, max_retries=0, parallelism=2).endpoint_settings) == (2, 0, 5.0)


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"url": "scorer/score"}, "http"),
        ({"scores": []}, "at least 1"),
        ({"scores": [{"name": "s"}, {"name": "s"}]}, "must be unique"),
        ({"scores": [{"name": "s", "json_path": "$[["}]}, "not a valid JSONPath"),
        ({"scores": [{"name": "s", "minimum": 2, "maximum": 1}]}, "must be less than maximum"),
        ({"api_key_env": "Bearer abc"}, "NAME of an environment variable"),
        ({"body": {"x": "{{ broken"}}, "syntax error"),
        ({"timeout_seconds": 0}, "greater than 0"),
        ({"api_key_secrets": "x"}, "unknown key"),
    ],
)
def test_invalid_configs(fields: dict[str, Any], fragment: str) -> None:
    assert fragment in config_error(**fields)


def test_body_renders_over_the_metric_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_KEY_FOR_TEST", "k-1")
    metric = remote(api_key_env="REMOTE_KEY_FOR_TEST")
    request = metric.build_request(MetricContext({"question": "Why?", "n": 3}, {"output_text": "Because."}))
    assert request.url == "http://scorer:9000/score"
    assert request.body == {"input": "Because.", "question": "Why?", "n": 3, "fixed": 1}
    assert request.headers["Authorization"] == "Bearer k-1"
    assert "Authorization" not in remote().endpoint_handler().headers


def test_scores_by_jsonpath() -> None:
    metric = remote(
        scores=[
            {"name": "score"},
            {"name": "nested", "json_path": "$.result.items[1].value"},
            {"name": "text_number", "json_path": "$.as_text"},
            {"name": "flag", "json_path": "$.ok"},
            {"name": "absent", "json_path": "$.nothing"},
            {"name": "null", "json_path": "$.none"},
        ]
    )
    response = {
        "score": 3,
        "result": {"items": [{"value": 1}, {"value": 0.25}]},
        "as_text": "0.5",
        "ok": True,
        "none": None,
    }
    out = score_of(metric, response)
    assert {k: v for k, v in out.items() if not math.isnan(v)} == {
        "score": 3.0,
        "nested": 0.25,
        "text_number": 0.5,
        "flag": 1.0,
    }
    assert math.isnan(out["absent"]) and math.isnan(out["null"])


def test_bounds_are_not_enforced() -> None:
    assert score_of(remote(scores=[{"name": "score", "minimum": 0, "maximum": 1}]), {"score": 7}) == {"score": 7.0}


@pytest.mark.parametrize("value", ["high", [1], {"a": 1}])
def test_non_numeric_values_fail_the_row(value: Any) -> None:
    with pytest.raises(MetricError, match=r"score 'score' at \$\.score is not a number"):
        score_of(remote(), {"score": value})


def test_a_failed_call_fails_the_row() -> None:
    failed = EndpointReply(error="HTTP 500 from the scorer", error_kind="endpoint", status=500, attempts=4)
    metric = remote()
    with pytest.raises(MetricError, match="the remote scorer failed: HTTP 500 from the scorer"):
        metric.score(MetricContext({}, {}, {"remote": failed}))
    with pytest.raises(MetricError, match="CallMetricEndpoints"):
        metric.score(MetricContext({}, {}))


def test_real_calls_to_the_test_server(clean_server) -> None:
    """POST through the shared engine to /agent, which answers {"output": <rule reply>, "usage": {...}}."""
    rules = [{"match": "good answer", "reply": "0.75"}, {"match": "bad answer", "status": 400}]
    srv = clean_server
    srv.configure(rules=rules)
    metric = remote(
        url=f"{srv.root_url}/agent",
        body={"input": "{{ sample.output_text }}", "id": "{{ item.id }}"},
        scores=[
            {"name": "score", "json_path": "$.output"},
            {"name": "prompt_words", "json_path": "$.usage.prompt_tokens"},
            {"name": "missing", "json_path": "$.nope"},
        ],
        max_retries=0,
    )
    settings = metric.endpoint_settings
    engine = InferenceEngine.shared(metric.endpoint_handler(), *settings)

    def call(text: str) -> MetricContext:
        ctx = MetricContext({"id": 1}, {"output_text": text})
        outcome = engine.call(metric.build_request(ctx), metric.endpoint_handler())
        return MetricContext(ctx.item, ctx.sample, {"remote": reply_from_outcome(outcome)})

    out = metric.score(call("a good answer"))
    assert (out["score"], out["prompt_words"]) == (0.75, 3.0)
    assert math.isnan(out["missing"])
    assert srv.last_request()["body"] == {"input": "a good answer", "id": 1}
    with pytest.raises(MetricError, match="the remote scorer failed: .*400"):
        metric.score(call("a bad answer"))
    with pytest.raises(MetricError, match="is not a number: 'an echo'"):
        metric.score(call("an echo"))  # no rule: the server echoes the input
    assert srv.stats()["requests"] == 3
