"""The pacer in the real engine against the test server's provider-style limits (no Beam): rates, headers, budget."""

from __future__ import annotations

import time

from beameval.config import ModelTarget, Params, TargetConfig
from beameval.config.quota import Budget, Pricing, RateLimit
from beameval.inference.engine import InferenceEngine
from beameval.inference.pacing import estimate_tokens
from beameval.inference.quota import EndpointQuota
from beameval.inference.targets import make_handler
from beameval.testserver.harness import ServerProcess


def handler_for(server: ServerProcess):
    target = TargetConfig(model=ModelTarget(url=server.base_url, name="m", format="openai"))
    return make_handler(target, Params(), None)


def send_all(server: ServerProcess, count: int, quota: EndpointQuota | None, **body: object) -> list:
    handler = handler_for(server)
    engine = InferenceEngine(handler, 32, 5, 30.0, quota=quota)
    try:
        request = {"messages": [{"role": "user", "content": "one two three"}], **body}
        futures = [engine.submit(handler.prepare(request), handler) for _ in range(count)]
        return [future.result(timeout=120) for future in futures]
    finally:
        engine.close()


def test_estimate_is_a_quarter_of_the_prompt_characters_plus_max_tokens() -> None:
    body = {"messages": [{"role": "system", "content": "abcde"}, {"role": "user", "content": "fgh"}], "max_tokens": 7}
    assert estimate_tokens(body, 999) == (2, 7)  # ceil(8 / 4), max_tokens
    assert estimate_tokens({"prompt": "x" * 9}, 999) == (3, 256)  # no max_tokens: the default
    assert estimate_tokens({"input": "anything"}, 41) == (11, 256)  # agent body: the wire length


def test_a_configured_request_rate_is_kept_without_429s(clean_server: ServerProcess) -> None:
    clean_server.configure(quota={"requests_per_minute": 600})  # 10/s, burst 1 s; no headers
    started = time.monotonic()
    outcomes = send_all(clean_server, 40, EndpointQuota(RateLimit(requests_per_minute=600)))
    elapsed = time.monotonic() - started
    assert all(outcome.ok and outcome.attempts == 1 for outcome in outcomes)
    assert clean_server.stats()["by_status"] == {"200": 40}
    assert elapsed >= (40 - 5 - 1) / 10  # half a second of burst, then 10 a second


def test_advertised_limits_are_kept_with_no_rate_limit_configured(clean_server: ServerProcess) -> None:
    clean_server.configure(quota={"requests_per_minute": 600, "headers": True})
    outcomes = send_all(clean_server, 40, None)
    assert all(outcome.ok for outcome in outcomes)
    assert clean_server.stats()["by_status"].get("429", 0) <= 1


def test_without_a_limit_to_read_the_adaptive_limit_alone_meets_429s(clean_server: ServerProcess) -> None:
    clean_server.configure(quota={"requests_per_minute": 600})  # the same limit, not advertised
    send_all(clean_server, 40, None)
    assert clean_server.stats()["by_status"].get("429", 0) >= 10  # what pacing by rate prevents


def test_a_tokens_per_minute_limit_is_kept_and_corrected_by_usage(clean_server: ServerProcess) -> None:
    # 60 tokens/s. Each request is charged ceil(13 / 4) + 5 = 9 and uses 3 + 3 = 6 (the echo).
    clean_server.configure(quota={"tokens_per_minute": 3600})
    started = time.monotonic()
    outcomes = send_all(clean_server, 30, EndpointQuota(RateLimit(tokens_per_minute=3600)), max_tokens=5)
    elapsed = time.monotonic() - started
    assert all(outcome.ok and outcome.attempts == 1 for outcome in outcomes)
    assert (
        sum(o.prompt_tokens + o.completion_tokens for o in outcomes) == 180 == clean_server.stats()["quota"]["tokens"]
    )
    # Charged at 9 a request the 30 would take 4.5 s less the 30-token burst; corrected to 6, about 2.5 s.
    assert (180 - 30 - 9) / 60 <= elapsed < (270 - 30) / 60


def test_the_budget_stops_sending_and_never_passes_its_tokens(clean_server: ServerProcess) -> None:
    quota = EndpointQuota(budget=Budget(max_tokens=50), job="budget-test", pricing=Pricing(input_per_million=1))
    outcomes = send_all(clean_server, 20, quota, max_tokens=5)
    answered = [outcome for outcome in outcomes if outcome.ok]
    refused = [outcome for outcome in outcomes if not outcome.ok]
    # Reserved 9 each, used 6: a request goes while spent + in flight + 9 <= 50, so 7 go (42 tokens).
    assert len(answered) == 7 == clean_server.stats()["requests"]
    assert sum(o.prompt_tokens + o.completion_tokens for o in answered) == 42
    assert {o.error.failure_class for o in refused} == {"budget"}
    assert {o.attempts for o in refused} == {0}
    assert "params.budget" in str(refused[0].error)


def test_rate_limit_urls_never_carry_a_password_and_need_a_rate() -> None:
    import pytest
    from pydantic import ValidationError

    from beameval.config.schema import parse_config
    from beameval.core.errors import ConfigError

    limit = {"requests_per_minute": 60, "shared": "redis://:hunter2-secret@10.0.0.5:6379/0"}
    config = {
        "dataset": {"path": "d.jsonl"},
        "target": {"model": {"url": "http://127.0.0.1:1/v1", "name": "m", "rate_limit": limit}},
        "prompt_template": "{{ item.q }}",
        "metrics": [{"type": "exact-match", "reference": "x"}],
    }
    with pytest.raises(ConfigError, match="shared_password_env") as caught:
        parse_config(config)
    assert "hunter2-secret" not in str(caught.value)
    with pytest.raises(ValidationError, match="redis://HOST:PORT/DB"):
        RateLimit(requests_per_minute=60, shared="http://10.0.0.5:6379/0")
    with pytest.raises(ValidationError, match="no budget to share"):
        RateLimit(shared="redis://10.0.0.5:6379/0")
    assert Pricing(input_per_million=2, output_per_million=8, batch_discount=0.5).cost(
        1_000_000, 500_000, batch=True
    ) == pytest.approx((2 + 4) / 2)
