"""Provider-style rate limits for the test server: request and token buckets per minute, 429s, ``x-ratelimit-*``.

What OpenAI-style providers do, small enough to read: a bucket of requests and one of
tokens, each refilled continuously at its per-minute limit / 60 a second and holding
``burst_s`` seconds of it. A request is admitted when the request bucket holds 1 and the
token bucket holds its estimate (prompt words + ``max_tokens`` or
``max_completion_tokens``, capped at the bucket's size); admitting takes both out, and
the reply's real ``usage.total_tokens`` replaces the estimate when it is sent. Otherwise
the answer is 429 with ``Retry-After`` (seconds until both buckets hold enough, as a
decimal) and OpenAI's error body (``type`` ``requests`` or ``tokens``, ``code``
``rate_limit_exceeded``). With ``headers: true`` every inference reply, 429s included,
carries ``x-ratelimit-limit-*``, ``x-ratelimit-remaining-*`` (what the bucket holds now)
and ``x-ratelimit-reset-*`` (until it is full, as ``1s``, ``250ms``, ``6m0s``) for
``requests`` and ``tokens``; ``header_values`` are sent as given over them (a provider
advertising nonsense), and ``retry_after: false`` drops ``Retry-After`` from the 429s
(a gateway that says nothing but 429). The timeline (``/_stats`` ``quota``) counts what was
admitted and refused in each second since the last reset, so a benchmark can measure
utilisation and the worst window.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from beameval.testserver.wire import body_of, json_response

__all__ = ["ProviderQuota", "QuotaConfig", "go_duration"]


class QuotaConfig(BaseModel):
    """The provider's limits (``FaultConfig.quota``); each limit is optional."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    #: Seconds of each rate a bucket holds (the burst a client may send at once).
    burst_s: float = Field(default=1.0, gt=0)
    #: Send x-ratelimit-* headers on every inference reply.
    headers: bool = False
    #: Send ``Retry-After`` with the 429s (false: a gateway that says nothing but 429).
    retry_after: bool = True
    #: Headers sent as given on every inference reply, 429s included, over the computed ones: a
    #: provider advertising a value that cannot be right (``x-ratelimit-limit-requests: 0.001``).
    header_values: dict[str, str] = Field(default_factory=dict)


def go_duration(seconds: float) -> str:
    """A duration as OpenAI writes it: ``20ms``, ``1s``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{round(rest, 3):g}s"


class _Bucket:
    """Level, capacity and refill rate of one limit (the server's own, independent of the client's)."""

    def __init__(self, per_minute: float, burst_s: float) -> None:
        self.limit = per_minute
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst_s)
        self.level = self.capacity
        self.at = time.monotonic()

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now

    def shortfall_s(self, cost: float) -> float:
        need = min(cost, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def headers(self, kind: str) -> dict[str, str]:
        return {
            f"x-ratelimit-limit-{kind}": f"{self.limit:g}",
            f"x-ratelimit-remaining-{kind}": str(max(0, math.floor(self.level))),
            f"x-ratelimit-reset-{kind}": go_duration((self.capacity - self.level) / self.rate),
        }


@dataclass(slots=True)
class Admission:
    """A request's pass through the quota: the 429 to send instead, or the tokens charged."""

    refusal: web.Response | None
    charged: int


class ProviderQuota:
    """The server's buckets (rebuilt when the configured limits change) and the per-second timeline."""

    def __init__(self) -> None:
        self._config: QuotaConfig | None = None
        self._requests: _Bucket | None = None
        self._tokens: _Bucket | None = None
        self.reset()

    def reset(self) -> None:
        """Full buckets and an empty timeline."""
        self._config = None
        self._started = time.monotonic()
        self._timeline: list[list[int]] = []  # per second: admitted requests, tokens used, 429s

    def _second(self, now: float) -> list[int]:
        index = int(now - self._started)
        while len(self._timeline) <= index:
            self._timeline.append([0, 0, 0])
        return self._timeline[index]

    def _buckets(self, config: QuotaConfig) -> None:
        if config != self._config:
            self._config = config
            rpm, tpm = config.requests_per_minute, config.tokens_per_minute
            self._requests = None if rpm is None else _Bucket(rpm, config.burst_s)
            self._tokens = None if tpm is None else _Bucket(tpm, config.burst_s)

    def admit(self, config: QuotaConfig | None, prompt: str, body: dict[str, Any]) -> Admission:
        """Admit the request (charging its estimate) or build its 429."""
        if config is None:
            return Admission(None, 0)
        self._buckets(config)
        now = time.monotonic()
        limit = body.get("max_tokens", body.get("max_completion_tokens"))
        estimate = len(prompt.split()) + (limit if isinstance(limit, int) and limit > 0 else 0)
        waits = []
        for kind, bucket, cost in (("requests", self._requests, 1), ("tokens", self._tokens, estimate)):
            if bucket is not None:
                bucket.refill(now)
                wait = bucket.shortfall_s(cost)
                if wait > 0:
                    waits.append((wait, kind, bucket))
        if waits:
            wait, kind, bucket = max(waits, key=lambda found: found[0])
            self._second(now)[2] += 1
            message = (
                f"Rate limit reached for {kind} per min (RPM/TPM): Limit {bucket.limit:g}, "
                f"Remaining {max(0, math.floor(bucket.level))}. Please try again in {go_duration(wait)}."
            )
            body = {"error": {"message": message, "type": kind, "param": None, "code": "rate_limit_exceeded"}}
            headers = {"Retry-After": f"{math.ceil(wait * 1000) / 1000:g}"} if config.retry_after else {}
            headers.update(self.headers())
            return Admission(json_response(429, body, headers), 0)
        if self._requests is not None:
            self._requests.level -= 1
        if self._tokens is not None:
            self._tokens.level -= estimate
        self._second(now)[0] += 1
        return Admission(None, estimate)

    def settle(self, config: QuotaConfig | None, admission: Admission, response: web.Response | None) -> None:
        """Replace the estimate with the reply's usage and add the headers to the reply."""
        if config is None or response is None:
            return
        used = 0
        if 200 <= response.status < 300:
            try:
                usage = json.loads(body_of(response)).get("usage") or {}
                used = int(usage.get("total_tokens", 0))
            except (ValueError, AttributeError, TypeError):
                used = 0
        if self._tokens is not None:
            self._tokens.refill(time.monotonic())
            self._tokens.level = min(self._tokens.capacity, self._tokens.level - (used - admission.charged))
        self._second(time.monotonic())[1] += used
        if config.headers or config.header_values:
            response.headers.update(self.headers())

    def headers(self) -> dict[str, str]:
        """The ``x-ratelimit-*`` headers of the buckets now (none unless ``headers: true``), then ``header_values``."""
        if self._config is None:
            return {}
        if not self._config.headers:
            return dict(self._config.header_values)
        now = time.monotonic()
        found: dict[str, str] = {}
        for kind, bucket in (("requests", self._requests), ("tokens", self._tokens)):
            if bucket is not None:
                bucket.refill(now)
                found.update(bucket.headers(kind))
        return {**found, **self._config.header_values}

    def snapshot(self) -> dict[str, Any]:
        """``/_stats`` ``quota``: totals and the per-second timeline since the last reset."""
        return {
            "admitted_requests": sum(second[0] for second in self._timeline),
            "tokens": sum(second[1] for second in self._timeline),
            "limited": sum(second[2] for second in self._timeline),
            "timeline": [
                {"second": index, "requests": second[0], "tokens": second[1], "limited": second[2]}
                for index, second in enumerate(self._timeline)
            ],
        }
