"""The test server's provider-style limits, read with an independent client (httpx): buckets, 429s, headers."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import httpx
import pytest

from beameval.inference.ratelimit_headers import parse_duration
from beameval.testserver.harness import ServerProcess
from beameval.testserver.quota import go_duration


@pytest.fixture
def client(clean_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=clean_server.base_url, trust_env=False, timeout=5.0) as http:
        yield http


def chat(client: httpx.Client, text: str = "one two three", **extra: object) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], **extra}
    return client.post("/chat/completions", json=body)


def test_request_bucket_allows_its_burst_then_429_with_retry_after_and_openai_body(
    clean_server: ServerProcess, client: httpx.Client
) -> None:
    # 120/min = 2/s, burst 2 s: the bucket holds 4 requests.
    clean_server.configure(quota={"requests_per_minute": 120, "burst_s": 2.0, "headers": True})
    statuses = [chat(client).status_code for _ in range(6)]
    assert statuses[:4] == [200] * 4 and 429 in statuses[4:]
    refused = chat(client)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["type"] == "requests" and error["code"] == "rate_limit_exceeded"
    assert "Limit 120" in error["message"]
    retry_after = float(refused.headers["retry-after"])
    assert 0 < retry_after <= 0.5 + 1e-3  # one request refills in 0.5 s
    assert refused.headers["x-ratelimit-limit-requests"] == "120"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    time.sleep(retry_after + 0.05)
    assert chat(client).status_code == 200  # refilled continuously, not per minute
    stats = clean_server.stats()["quota"]
    assert stats["admitted_requests"] == 5 and stats["limited"] == statuses.count(429) + 1
    assert sum(second["requests"] for second in stats["timeline"]) == 5


def test_token_bucket_charges_prompt_and_max_tokens_and_corrects_with_usage(
    clean_server: ServerProcess, client: httpx.Client
) -> None:
    # 600 tokens/min = 10/s, burst 1 s: 10 tokens. Prompt "one two three": 3 words; the echo answers 3.
    clean_server.configure(quota={"tokens_per_minute": 600, "headers": True})
    first = chat(client, max_tokens=5)  # charged 3 + 5 = 8, then 6 (usage): 4 left
    assert first.status_code == 200
    assert int(first.headers["x-ratelimit-remaining-tokens"]) in (4, 5)  # plus what refilled meanwhile
    refused = chat(client, max_tokens=5)  # needs 8
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "tokens"
    assert 0.3 <= float(refused.headers["retry-after"]) <= 0.41
    assert parse_duration(refused.headers["x-ratelimit-reset-tokens"]) == pytest.approx(0.6, abs=0.06)
    stats = clean_server.stats()["quota"]
    assert stats["tokens"] == 6 and stats["limited"] == 1


def test_headers_are_only_sent_when_asked(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(quota={"requests_per_minute": 6000})
    reply = chat(client)
    assert reply.status_code == 200 and not any(name.startswith("x-ratelimit") for name in reply.headers)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.02, "20ms"), (0.25, "250ms"), (1.0, "1s"), (1.5, "1.5s"), (360.0, "6m0s")]
)
def test_durations_are_written_as_openai_does_and_read_back(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text
    assert math.isclose(parse_duration(text) or -1, seconds)
