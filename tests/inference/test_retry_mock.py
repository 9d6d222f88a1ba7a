"""call_with_retries against a scripted client: retry decisions and waits, with no real sleeping.

The client here stands in for ``HttpClient`` at the ``PostClient`` boundary (replies or
exceptions in order); the real transport against a real server is in test_engine_server.py.
"""

import asyncio
import json
import random

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from beameval.config import ModelTarget, Params, TargetConfig
from beameval.inference.http_client import HttpReply
from beameval.inference.limiter import AdaptiveLimiter
from beameval.inference.prepared import request_hash
from beameval.inference.retry import RetryPolicy, call_with_retries
from beameval.inference.targets import make_handler

KEY = "sk-test-SECRETSECRET"
OK = {
    "choices": [{"message": {"role": "assistant", "content": "fine"}}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 1},
}


def make(key=KEY):
    target = TargetConfig(model=ModelTarget(url="http://mock/v1", name="m", format="openai"))
    return make_handler(target, Params(), key)


def run_call(replies, max_retries=3, parallelism=4, prepared=None):
    """Serve ``replies`` in order (each a Response or an exception); return (outcome, waits, requests)."""
    handler = make()
    prepared = prepared or handler.prepare({"messages": [{"role": "user", "content": "q"}]})
    seen: list[Sent] = []
    waits: list[float] = []
    queue = list(replies)

    class ScriptedClient:
        async def post(self, url, *, content, headers=None):
            seen.append(Sent(url, content, dict(handler.headers if headers is None else headers)))
            item = queue.pop(0)
            if isinstance(item, Exception):
                raise item
            return item

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    ticks = iter(range(1000))

    async def main():
        policy = RetryPolicy(
            max_retries=max_retries, rng=random.Random(0), sleep=fake_sleep, clock=lambda: float(next(ticks))
        )
        limiter = AdaptiveLimiter(parallelism)
        outcome = await call_with_retries(
            ScriptedClient(), limiter, handler, prepared, policy, client_headers=handler.headers
        )
        return outcome, limiter

    outcome, limiter = asyncio.run(main())
    return outcome, waits, seen, limiter, prepared


class Sent:
    def __init__(self, url, content, headers):
        self.url, self.content = url, content
        self.headers = {name.lower(): value for name, value in headers.items()}


def reply(status, body=None, headers=None, content=None):
    if content is None:
        content = json.dumps(body if body is not None else {"error": {"message": "nope"}}).encode()
    return HttpReply(status, {k.lower(): v for k, v in (headers or {}).items()}, content)


def refused():
    key = ConnectionKey("mock", 80, False, True, None, None, None)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "Connection refused"))


def test_success_records_usage_hash_and_latency():
    outcome, waits, seen, limiter, prepared = run_call([reply(200, OK)])
    assert outcome.ok and outcome.sample["output_text"] == "fine"
    assert (outcome.attempts, outcome.status, outcome.prompt_tokens, outcome.completion_tokens) == (1, 200, 2, 1)
    assert outcome.request_hash == request_hash(prepared)
    assert outcome.latency_s == 1.0 and waits == []
    assert json.loads(seen[0].content) == prepared.body
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert limiter.in_flight == 0


def test_retry_after_is_a_floor_on_the_wait():
    outcome, waits, seen, limiter, _ = run_call(
        [reply(429, headers={"Retry-After": "2"}), reply(503, headers={"Retry-After": "0.5"}), reply(200, OK)]
    )
    assert outcome.ok and outcome.attempts == 3
    assert waits[0] >= 2.0 and waits[1] >= 0.5
    assert outcome.failure_classes == ("hard_overload", "hard_overload")
    assert limiter.decreases == 2  # 4 -> 2 -> 1 (each 429 came from its own window), then +1 on success
    assert limiter.limit == 2


def test_non_retryable_status_is_not_retried():
    outcome, waits, seen, _, _ = run_call([reply(400, {"error": {"message": "bad field 'x'"}})])
    assert not outcome.ok and len(seen) == 1 and waits == []
    error = outcome.error
    assert (error.status, error.failure_class, error.attempts) == (400, "fatal", 1)
    assert error.message.startswith("HTTP 400 Bad Request from http://mock/v1/chat/completions: ")
    assert "bad field 'x'" in error.message


def test_max_retries_bounds_attempts_and_message_keeps_status():
    outcome, waits, seen, _, _ = run_call([reply(503, headers={"Retry-After": "1"})] * 5, max_retries=2)
    assert len(seen) == 3 and outcome.attempts == 3 and len(waits) == 2
    assert outcome.error.message == (
        "request failed after 3 attempts: HTTP 503 Service Unavailable from "
        "http://mock/v1/chat/completions (retry-after 1s)"
    )
    assert outcome.error.status == 503 and outcome.status == 503
    assert "parallelism" in (outcome.error.hint or "")


def test_zero_retries_means_one_attempt():
    outcome, waits, seen, _, _ = run_call([reply(500)], max_retries=0)
    assert len(seen) == 1 and outcome.attempts == 1 and waits == []
    assert outcome.error.message.startswith("HTTP 500 Internal Server Error")


def test_malformed_200_is_retried_then_fails_clearly():
    outcome, waits, seen, _, _ = run_call([reply(200, content=b"<html>oops")] * 3, max_retries=2)
    assert len(seen) == 3
    assert outcome.error.failure_class == "transient"
    assert "not valid JSON" in outcome.error.message and "after 3 attempts" in outcome.error.message
    assert outcome.error.status == 200


def test_missing_choices_is_retried():
    outcome, _, seen, _, _ = run_call([reply(200, {"id": "x"}), reply(200, OK)])
    assert outcome.ok and len(seen) == 2 and outcome.failure_classes == ("transient",)


def test_empty_answer_is_not_retried():
    empty = {"choices": [{"message": {"role": "assistant", "content": ""}}]}
    outcome, _, seen, _, _ = run_call([reply(200, empty)])
    assert len(seen) == 1 and outcome.error.message.startswith("the model returned an empty answer")
    assert outcome.error.failure_class == "fatal"


def test_connection_errors_and_timeouts_are_retried():
    outcome, waits, seen, limiter, _ = run_call(
        [
            refused(),
            aiohttp.ClientOSError(104, "Connection reset by peer"),
            aiohttp.ServerTimeoutError("timed out"),
            reply(200, OK),
        ]
    )
    assert outcome.ok and outcome.attempts == 4
    assert outcome.failure_classes == ("transient", "transient", "soft_overload")
    assert limiter.decreases == 1  # one soft decrease 4 -> 3, then +1 on success


def test_connection_refused_final_message():
    outcome, *_ = run_call([refused()] * 2, max_retries=1)
    assert outcome.error.message == (
        "request failed after 2 attempts: connection refused by mock (is the server running?)"
    )


def test_key_never_leaks_into_messages():
    body = {"error": {"message": f"Incorrect API key provided: {KEY}"}}
    outcome, *_ = run_call([reply(401, body)])
    assert KEY not in outcome.error.message and KEY not in str(outcome.error)
    assert "API key" in (outcome.error.hint or "")


def test_unserialisable_body_is_a_clean_error():
    handler = make()
    prepared = handler.prepare({"messages": [{"role": "user", "content": float("nan")}]})
    outcome, _, seen, _, _ = run_call([], prepared=prepared)
    assert seen == [] and outcome.attempts == 0
    assert "cannot be sent as JSON" in outcome.error.message


@pytest.mark.parametrize("status", [408, 500, 502, 504])
def test_transient_statuses_are_retried(status):
    outcome, _, seen, limiter, _ = run_call([reply(status), reply(200, OK)])
    assert outcome.ok and len(seen) == 2 and limiter.limit == 4
