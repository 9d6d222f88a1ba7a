"""The preflight's look at an endpoint: one free request, through the run's own client, within a deadline.

The probe goes through ``HttpClient`` (so proxies, the CA bundle and the key header apply
exactly as in the run), reads only the status, and is bounded as a whole: a server that
trickles one byte a second cannot hold the command line before any output. A 429 or 503
is retried like any request, honouring ``Retry-After`` within the deadline; a failure that
retrying cannot fix (refused TLS, a 401) comes back at once.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from beameval.inference.backoff import RandomSource, retry_wait
from beameval.inference.classify import Failure, classify
from beameval.inference.http_client import HttpClient
from beameval.inference.targets.base import TargetHandler

__all__ = ["ProbeResult", "probe"]

PROBE_DEADLINE_S = 15.0


@dataclass(frozen=True)
class ProbeResult:
    """What the probe saw: the final status (None when no reply came) and, when it failed, why."""

    status: int | None
    failure: Failure | None
    attempts: int


async def probe(
    handler: TargetHandler,
    url: str,
    *,
    max_attempts: int = 3,
    deadline_s: float = PROBE_DEADLINE_S,
    rng: RandomSource | None = None,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ProbeResult:
    """GET ``url`` with the handler's headers until it answers, fails for good, or the deadline passes.

    Args:
        handler: the endpoint's handler (headers, CA bundle, secrets to mask).
        url: what to GET (a models listing for OpenAI-compatible endpoints).
        max_attempts: attempts in all, for retryable failures.
        deadline_s: the most the whole probe may take, waits included.
        rng: jitter for the back-off.
        sleep: awaited between attempts (tests pass a fake).
        clock: a monotonic clock in seconds.

    Returns:
        The last status and failure. ``failure`` is None whenever a reply came whose status
        retrying would not change (2xx, 401, 404, ...): the caller judges those (a missing
        models listing is fine, a refused key is not).

    """
    jitter = rng or random.Random()
    end = clock() + deadline_s
    client = HttpClient(1, deadline_s, handler.headers, ca_bundle=handler.ca_bundle, max_response_bytes=1 << 20)
    attempt = 0
    try:
        while True:
            attempt += 1
            status: int | None = None
            remaining = max(0.1, end - clock())
            try:
                reply = await asyncio.wait_for(client.request("GET", url, read_body=False), remaining)
            except Exception as exc:  # classified; cancellation propagates
                failure: Failure | None = classify(exc, url=url, secrets=handler.secrets)
            else:
                status = reply.status_code
                failure = classify(status, url=url, headers=reply.headers, secrets=handler.secrets)
                if not failure.retryable:
                    return ProbeResult(status, None, attempt)
            assert failure is not None
            wait = retry_wait(failure, attempt, jitter)
            if not failure.retryable or attempt >= max_attempts or clock() + wait >= end:
                return ProbeResult(status, failure, attempt)
            await sleep(wait)
    finally:
        await client.aclose()
