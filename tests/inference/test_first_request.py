"""send_first_request against the real test server: retried as the run would, overload only warns, the reply kept."""

from __future__ import annotations

import asyncio
import json

import pytest

from beameval.cache.key import response_key
from beameval.config import ModelTarget, Params, TargetConfig
from beameval.core.errors import EndpointError
from beameval.inference.first_request import FirstResult, keyed, send_first_request
from beameval.inference.targets import make_handler

KEY = "sk-first-request-KEY123456"
PROMPT = {"messages": [{"role": "user", "content": "first question"}]}


def send(base_url: str, params: Params, **model_fields: object) -> FirstResult:
    model = ModelTarget(url=base_url, name="test-model", format="openai", **model_fields)
    target = TargetConfig(model=model)
    handler = make_handler(target, params, KEY)
    request = keyed(handler, handler.prepare(PROMPT))
    assert request is not None
    prepared, key = request
    assert key == response_key(prepared.url, prepared.body, 0, prepared.headers, (KEY,))  # GenerateSamples' key
    sending = send_first_request(
        handler, prepared, key, where="target.model", model="test-model", access=model, params=params, job="t"
    )
    return asyncio.run(sending)


def test_a_429_is_retried_and_the_answer_is_kept_as_received(clean_server) -> None:
    clean_server.configure(rules=[{"match": "first", "fail_times": 1, "status": 429, "retry_after": 0}])
    result = send(clean_server.base_url, Params(max_retries=2), pricing={"input_per_million": 1e6})
    answer = result.answer
    assert answer is not None and result.warning is None
    assert (answer.attempts, answer.status, answer.model) == (2, 200, "test-model")
    reply = json.loads(answer.response)
    assert reply["choices"][0]["message"]["content"] == "first question"  # the echo, as received
    assert answer.tokens == 4 and answer.usd == pytest.approx(2.0)  # 2 prompt words at $1 each
    assert clean_server.stats()["per_prompt"] == {"first question": 2}


def test_an_endpoint_that_asks_to_wait_past_the_deadline_is_a_warning_not_an_error(clean_server) -> None:
    clean_server.configure(error_rate=1.0, error_status=503, retry_after=60)
    result = send(clean_server.base_url, Params(max_retries=3, max_retry_wait=120))
    assert result.answer is None
    assert result.warning is not None and "only with overload or timeout failures for 15 s" in result.warning
    assert clean_server.stats()["requests"] == 1  # no 60 s wait: the run retries it itself


def test_a_refused_key_keeps_the_credentials_message(clean_server) -> None:
    clean_server.configure(api_key="another-key")
    with pytest.raises(EndpointError) as raised:
        send(clean_server.base_url, Params(), api_key_env="FIRST_REQUEST_KEY")
    assert str(raised.value) == (
        f"preflight: {clean_server.base_url}/chat/completions rejected the credentials (HTTP 401). "
        "Check the key in $FIRST_REQUEST_KEY."
    )
    assert raised.value.status == 401
    assert KEY not in str(raised.value)
