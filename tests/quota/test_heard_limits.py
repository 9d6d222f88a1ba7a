"""The preflight's reply tells the workers' pacers the endpoint's limits: no request goes alone to read them.

Against the real test server: the preflight's ``send_first_request``, then the engine a
worker builds with what it heard (``InferenceEngine.for_endpoint(..., heard)``), and the
server's own count of requests in flight while the first replies are still on their way
(latency 1 s). Without the handover the first request goes alone until it is answered, so
the server holds one request for the first second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from beameval.config import ModelTarget, Params, TargetConfig
from beameval.inference.engine import InferenceEngine
from beameval.inference.first_request import keyed, send_first_request
from beameval.inference.ratelimit_headers import HeardLimits
from beameval.inference.targets import make_handler
from beameval.inference.targets.base import TargetHandler
from beameval.testserver.harness import ServerProcess

LATENCY_MS = 1000
PARAMS = Params(parallelism=16, max_retries=3, request_timeout=30)
#: When the server's in-flight count is read: well inside the first replies' second.
LOOK_AFTER_S = 0.45


def target_for(server: ServerProcess, name: str = "m") -> tuple[ModelTarget, TargetHandler]:
    model = ModelTarget(url=server.base_url, name=name, format="openai")
    return model, make_handler(TargetConfig(model=model), PARAMS, None)


def preflight(server: ServerProcess) -> HeardLimits:
    """What the preflight's request to ``server`` heard about its limits (the run's own ``send_first_request``)."""
    model, handler = target_for(server)
    request = keyed(handler, handler.prepare({"messages": [{"role": "user", "content": "first"}]}))
    assert request is not None
    sending = send_first_request(
        handler, request[0], request[1], where="target.model", model="m", access=model, params=PARAMS, job="t"
    )
    answer = asyncio.run(sending).answer
    assert answer is not None and answer.limits is not None
    return answer.limits


@pytest.fixture
def engines() -> Iterator[list[InferenceEngine]]:
    made: list[InferenceEngine] = []
    yield made
    for engine in made:
        engine.close()


def opening(
    server: ServerProcess, engines: list[InferenceEngine], heard: HeardLimits | None, count: int
) -> tuple[int, list[Any]]:
    """Send ``count`` requests through a worker's engine given ``heard``: the server's in flight early on, outcomes."""
    model, handler = target_for(server)
    engine = InferenceEngine.for_endpoint(handler, model, PARAMS, "t", heard)
    engines.append(engine)
    server.reset()
    futures = [
        engine.submit(handler.prepare({"messages": [{"role": "user", "content": f"q{i}"}]}), handler)
        for i in range(count)
    ]
    time.sleep(LOOK_AFTER_S)
    in_flight = server.stats()["in_flight"]
    return in_flight, [future.result(timeout=60) for future in futures]


def test_with_no_limits_advertised_the_first_requests_go_at_once(
    clean_server: ServerProcess, engines: list[InferenceEngine]
) -> None:
    clean_server.configure(latency_ms=LATENCY_MS)
    heard = preflight(clean_server)
    assert heard.headers == ()  # it advertises nothing: that is known, not unknown
    in_flight, outcomes = opening(clean_server, engines, heard, 16)
    assert in_flight == 16  # the whole slow-start window at once, no request alone first
    assert all(outcome.ok and outcome.attempts == 1 for outcome in outcomes)


def test_what_another_endpoint_advertised_is_not_taken_for_this_ones(
    clean_server: ServerProcess, engines: list[InferenceEngine]
) -> None:
    clean_server.configure(latency_ms=LATENCY_MS)
    _, other = target_for(clean_server, name="another-model")  # same URL, another model: another endpoint
    heard = HeardLimits(other.endpoint_key, ())
    in_flight, outcomes = opening(clean_server, engines, heard, 16)
    assert in_flight == 1  # the first request goes alone until the endpoint's first reply
    assert all(outcome.ok for outcome in outcomes)


def test_advertised_limits_pace_the_first_requests_with_no_429(
    clean_server: ServerProcess, engines: list[InferenceEngine]
) -> None:
    """600 a minute, a bucket of 10 at the server: 30 requests at once would get 20 429s; paced, none."""
    clean_server.configure(latency_ms=LATENCY_MS, quota={"requests_per_minute": 600, "headers": True})
    heard = preflight(clean_server)
    assert dict(heard.headers)["x-ratelimit-limit-requests"] == "600"
    in_flight, outcomes = opening(clean_server, engines, heard, 30)
    # Paced at 10 a second from a bucket of half a second (5): 5 at once, then one every 0.1 s.
    assert 4 <= in_flight <= 5 + 10 * LOOK_AFTER_S + 1, in_flight
    assert all(outcome.ok and outcome.attempts == 1 for outcome in outcomes)
    assert clean_server.stats()["by_status"] == {"200": 30}
