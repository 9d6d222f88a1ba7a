"""Pacing by rate: each attempt waits until the endpoint's request and token rates allow it, then is charged.

One ``Pacer`` per endpoint and worker process (the engine's), under the adaptive
concurrency limit: an attempt first passes the pacer, then takes a concurrency slot, so
the endpoint is never driven past either (while no limit is known, no ``rate_limit``, no
header read, no rate learnt, an attempt goes at once: no lock, no wait). What it keeps:

* **The configured rate** (``rate_limit``): R/60/W requests and T/60/W tokens a second for
  each of W worker processes, as token buckets holding half a second of each rate (so
  a worker never bursts more than that); with ``shared``, one GCRA budget in Redis for
  every worker instead (``shared_rate``). **Redis is never optional once named**: a
  worker that cannot reach it sends nothing new to the endpoint and asks again with
  back-off (``SharedGate``); after ``rate_limit.shared_timeout`` seconds without it,
  every attempt not yet sent raises ``QuotaStoreLost`` (the run stops, ``stopped:
  "quota_store"``). Falling back to a local share would let this worker draw R/W while
  the healthy ones keep drawing R from Redis: R·(1 + k/W) with k workers cut off.
* **The advertised rate**: every reply's ``x-ratelimit-*`` headers (with or without a
  ``rate_limit``) set a bucket per kind refilled at limit/60/W a second whose level
  never exceeds remaining/W; values that are not believable (``ratelimit_headers``) are
  ignored with one warning. Before the endpoint's first reply one request goes alone
  (at most ``PROBE_WAIT_S``), so a run never opens with a burst of 429s against a limit
  it has not read (one round trip per worker and endpoint, 6% of 1,000 requests at
  200 ms), unless the preflight's reply already said the limits or that there are none
  (``heard_before``). ``Retry-After`` is the retry loop's business.
* **The learnt rate**: with no ``rate_limit`` and no advertised limit, 429 replies teach
  the pacer a request rate (``learnt_rate``), so an endpoint that only says 429 is not
  driven into them; once learnt, only 429s to requests sent with fewer in flight than
  the first 429's cut it (a cap on requests in flight is the adaptive concurrency limit's).
* **No wait longer than the request's timeout**: a bucket that would hold an attempt
  longer than ``params.request_timeout`` in one wait fails it at once (``PacingTooLong``),
  naming the header or setting that asked for it; the run never stalls on a limit.
* **The estimate**: an attempt is charged ``ceil(prompt characters / 4)`` (the
  ``content`` of the messages, or the ``prompt``, and the JSON of every other field billed
  as input: ``tools``, ``response_format``, …; the whole body for agent and remote
  endpoints) plus its ``max_tokens`` (``max_completion_tokens``, else
  ``DEFAULT_COMPLETION_TOKENS``); when the reply's ``usage`` arrives the token buckets
  (and the budget) are corrected to ``prompt_tokens + completion_tokens``. A failed
  attempt keeps its request but gives its tokens back (the provider did not run it).
* **The budget**: each request reserves its estimate in the process's ``RunBudget`` (the
  job's) first; a refused reservation raises ``BudgetExhausted`` and nothing is sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from beameval.inference.budget import RunBudget
from beameval.inference.classify import endpoint_name
from beameval.inference.estimate import estimate_tokens
from beameval.inference.learnt_rate import LearntRate
from beameval.inference.not_sent import PacingTooLong
from beameval.inference.quota import EndpointQuota, redis_password
from beameval.inference.ratelimit_headers import Advertised, HeardLimits, advertised
from beameval.inference.token_bucket import TokenBucket

if TYPE_CHECKING:
    from beameval.inference.shared_rate import SharedGate

__all__ = ["Charge", "Pacer"]

log = logging.getLogger(__name__)

#: Seconds of each rate one worker may send at once.
BURST_S = 0.5
#: The longest the other requests wait for the endpoint's first reply (and its headers).
PROBE_WAIT_S = 2.0
#: The longest single pacing wait when the caller gives none (the engine passes ``params.request_timeout``).
MAX_WAIT_S = 600.0
_KINDS = ("requests", "tokens")


@dataclass(slots=True)
class Charge:
    """What one attempt was charged before it went (to correct once its reply is read).

    ``seq`` numbers the attempts in the order the pacer let them go (a learnt rate is cut
    once per round trip: only by replies to attempts sent after the last cut); ``sent_at``
    is when it went, ``in_flight`` the worker's requests in flight then, itself included
    (set by the caller once the attempt holds its concurrency slot).
    """

    tokens: int
    prompt: int
    completion: int
    usd: float
    seq: int = 0
    sent_at: float = 0.0
    in_flight: int = 1


class Pacer:
    """The rate and budget gate of one endpoint in one worker process (see the module docstring).

    ``admit`` and ``settle`` must be called from the engine's event loop.

    Args:
        quota: the endpoint's limits.
        endpoint_key: names the endpoint (for the shared budget's name and messages).
        clock: a monotonic clock in seconds.
        max_wait_s: the longest single pacing wait (``params.request_timeout``).

    """

    def __init__(
        self,
        quota: EndpointQuota,
        endpoint_key: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_wait_s: float = MAX_WAIT_S,
    ) -> None:
        self._clock = clock
        self._endpoint_key = endpoint_key
        self._max_wait = max_wait_s
        self._workers = max(1, quota.workers)
        self._pricing = quota.pricing
        self._endpoint = endpoint_name(endpoint_key)
        now = clock()
        self._configured: dict[str, TokenBucket] = {}
        self._shared: SharedGate | None = None
        limit = quota.rate_limit
        if limit is not None and limit.shared is not None:
            from beameval.inference.shared_rate import SharedGate, SharedRate, shared_name

            shared_rate = SharedRate(
                limit.shared,
                redis_password(limit),
                shared_name(limit.shared_key, quota.job, endpoint_key),
                None if limit.requests_per_minute is None else limit.requests_per_minute / 60.0,
                None if limit.tokens_per_minute is None else limit.tokens_per_minute / 60.0,
                BURST_S,
            )
            self._shared = SharedGate(shared_rate, limit.shared, limit.shared_timeout, self._endpoint, clock=clock)
        elif limit is not None:
            for kind, per_minute in (("requests", limit.requests_per_minute), ("tokens", limit.tokens_per_minute)):
                if per_minute is not None:
                    rate = per_minute / 60.0 / self._workers
                    self._configured[kind] = TokenBucket(rate, max(1.0, rate * BURST_S), now)
        self._advertised: dict[str, TokenBucket] = {}
        self._budget = RunBudget.of(quota)  # the job's, through its ledger; else 1/W of it
        self._advertised_by: dict[str, str] = {}  # kind -> the header values behind its bucket
        #: A rate learnt from 429s, only while nothing else says the limit (no rate_limit, no headers).
        self._learnt: LearntRate | None = LearntRate() if limit is None else None
        self._lock: asyncio.Lock | None = None
        self._first_reply: asyncio.Event | None = None
        self._replied = False  # the endpoint answered once: its headers, if any, were read
        self._last_headers: Mapping[str, str] | None = None  # the last reply's (``heard``)
        self._probing = False
        self._seq = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned_headers = False
        self.waited_s = 0.0

    @property
    def budget(self) -> RunBudget | None:
        """The process's share of the run's budget, when it has one."""
        return self._budget

    @property
    def learnt_rate(self) -> float | None:
        """Requests a second learnt from 429s, or None (no 429 yet, or a limit is known)."""
        return None if self._learnt is None else self._learnt.rate

    async def admit(self, body: Mapping[str, Any], wire_length: int) -> Charge:
        """Wait until one attempt of ``body`` may go, and charge it.

        Raises:
            BudgetExhausted: the run's budget would be passed; nothing was charged.
            QuotaStoreLost: the shared rate limit's Redis was away too long; nothing was charged.
            PacingTooLong: one wait would pass ``max_wait_s``; nothing was charged.
        """
        prompt, completion = estimate_tokens(body, wire_length)
        charge = Charge(prompt + completion, prompt, completion, self._cost(prompt, completion))
        if self._budget is not None:
            await self._budget.reserve(charge.tokens, charge.usd)
        try:
            if not self._replied:  # before the endpoint's first reply: one attempt goes alone
                await self._await_first_reply()
            if self._unpaced():  # nothing limits the rate yet: no lock, no wait
                if self._learnt is not None:
                    self._learnt.sent(self._clock())
            else:
                await self._paced(charge.tokens)
        except BaseException:
            if self._budget is not None:
                self._budget.settle(charge.tokens, charge.usd, 0, 0.0)
            raise
        charge.seq = self._seq
        self._seq += 1
        charge.sent_at = self._clock()
        return charge

    def settle(
        self, charge: Charge, headers: Mapping[str, str] | None, status: int | None, usage: Mapping[str, Any] | None
    ) -> None:
        """Read the reply's rate-limit headers and correct the charge with its usage (None: no reply)."""
        now = self._clock()
        if headers is not None:
            self._observe(headers, now)
            self._last_headers = headers
        self._mark_replied()
        self._probing = False
        ok = status is not None and 200 <= status < 300
        learnt = self._learnt
        if learnt is not None:
            if status == 429:
                learnt.refused(charge.seq, charge.sent_at, self._seq, now, charge.in_flight)
            elif ok:
                learnt.answered(now)
        prompt = _count(usage, "prompt_tokens") if ok else 0
        completion = _count(usage, "completion_tokens") if ok else 0
        if ok and (prompt is None or completion is None):  # no usage: the estimate stands
            prompt, completion = charge.prompt, charge.completion
        used = (prompt or 0) + (completion or 0)
        extra = used - charge.tokens
        if extra:
            for buckets in (self._advertised, self._configured):
                bucket = buckets.get("tokens")
                if bucket is not None:
                    bucket.adjust(extra, now)
            if self._shared is not None:
                task = asyncio.get_running_loop().create_task(self._adjust_shared(extra))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        if self._budget is not None:
            self._budget.settle(
                charge.tokens,
                charge.usd,
                used,
                self._cost(prompt or 0, completion or 0),
                endpoint=self._endpoint_key,
                prompt=prompt or 0,
                completion=completion or 0,
            )

    def heard(self) -> HeardLimits | None:
        """What the last reply advertised about the endpoint's limits (None before any), for other processes' pacers."""
        return None if self._last_headers is None else HeardLimits.of(self._endpoint_key, self._last_headers)

    def heard_before(self, heard: HeardLimits) -> None:
        """Start from the limits (or none) an earlier reply of this endpoint advertised: no request goes alone.

        Ignored for another endpoint's reply (URL, model or key) or once this pacer has had its own. On the loop.
        """
        if heard.endpoint_key != self._endpoint_key or self._replied:
            return
        self._observe(heard.mapping(), self._clock())
        self._mark_replied()

    def _mark_replied(self) -> None:
        """The endpoint's limits (or their absence) are known: requests waiting on the lone first one go."""
        if not self._replied:
            self._replied = True
            if self._first_reply is not None:
                self._first_reply.set()

    async def aclose(self) -> None:
        """Cancel pending corrections and close the shared budget's Redis connections."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._shared is not None:
            await self._shared.rate.aclose()

    def _cost(self, prompt: float, completion: float) -> float:
        return 0.0 if self._pricing is None else self._pricing.cost(prompt, completion)

    def _unpaced(self) -> bool:
        """True when no limit is known (no bucket, no Redis) and no attempt waits: FIFO holds without the lock."""
        learnt = self._learnt
        return (
            not self._advertised
            and not self._configured
            and self._shared is None
            and (learnt is None or learnt.bucket is None)
            and (self._lock is None or not self._lock.locked())
        )

    async def _paced(self, tokens: int) -> None:
        """Wait until the buckets (and Redis) let one attempt of ``tokens`` go, and charge it."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # FIFO: one attempt at a time asks the buckets (and Redis)
            while True:
                wait, source = await self._take(tokens)
                if wait <= 0:
                    return
                if source is not None and wait > self._max_wait:
                    raise self._too_long(source, wait)
                self.waited_s += wait
                await asyncio.sleep(wait)

    async def _await_first_reply(self) -> None:
        """Before the endpoint's first reply, only one attempt goes (its headers may carry the limits)."""
        if self._first_reply is None:
            self._first_reply = asyncio.Event()
        if self._first_reply.is_set():
            return
        if not self._probing:
            self._probing = True
            return
        try:
            await asyncio.wait_for(self._first_reply.wait(), PROBE_WAIT_S)
        except asyncio.TimeoutError:
            self._replied = True  # a slow endpoint: stop waiting for it
            self._first_reply.set()

    async def _take(self, tokens: int) -> tuple[float, str | None]:
        """Charge one request and ``tokens`` if every limit allows it now (0), else the seconds to wait.

        Returns:
            The wait, and what asked for it (None when it is not a rate: Redis being away).

        Raises:
            QuotaStoreLost: the shared Redis has been away for ``shared_timeout``.
        """
        now = self._clock()
        wait, source = 0.0, None
        for kind, bucket in self._advertised.items():
            found = bucket.wait(1 if kind == "requests" else tokens, now)
            if found > wait:
                wait, source = found, self._advertised_by[kind]
        for kind, bucket in self._configured.items():
            found = bucket.wait(1 if kind == "requests" else tokens, now)
            if found > wait:
                wait, source = found, f"rate_limit.{kind}_per_minute (shared by {self._workers} worker processes)"
        learnt = self._learnt
        if learnt is not None and learnt.bucket is not None:
            found = learnt.bucket.wait(1, now)
            if found > wait:
                wait, source = (
                    found,
                    f"the request rate learnt from 429 replies ({learnt.bucket.rate * 60:.3g} a minute)",
                )
        if wait > 0:
            return wait, source
        if self._shared is not None:
            wait, away = await self._shared.wait(tokens)
            if wait > 0:
                return wait, None if away else "rate_limit (shared through Redis)"
            now = self._clock()
        for kind, bucket in self._advertised.items():
            bucket.take(1 if kind == "requests" else tokens, now)
        for kind, bucket in self._configured.items():
            bucket.take(1 if kind == "requests" else tokens, now)
        if learnt is not None:
            learnt.sent(now)
            if learnt.bucket is not None:
                learnt.bucket.take(1, now)
        return 0.0, None

    def _too_long(self, source: str, wait: float) -> PacingTooLong:
        return PacingTooLong(
            f"not sent: {source} would hold this request {wait:,.0f} s before it may go, longer than "
            f"params.request_timeout ({self._max_wait:g} s)",
            hint="A limit that low stalls the run: check it, or raise params.request_timeout to wait that long.",
        )

    async def _adjust_shared(self, extra: int) -> None:
        assert self._shared is not None
        try:
            await self._shared.rate.adjust_tokens(extra)
        except Exception as exc:  # noqa: BLE001 - the next admission finds Redis away and waits for it
            log.debug("correcting the shared token count failed: %s", exc)

    def _observe(self, headers: Mapping[str, str], now: float) -> None:
        for kind in _KINDS:
            limit = advertised(headers, kind)
            if limit is None:
                continue
            if not isinstance(limit, Advertised):
                if not self._warned_headers:
                    self._warned_headers = True
                    log.warning(
                        "%s sent a rate-limit header that cannot be right, %s: ignored (this warning is not repeated)",
                        self._endpoint,
                        limit,
                    )
                continue
            rate = limit.limit / 60.0 / self._workers
            bucket = self._advertised.get(kind)
            if bucket is None or bucket.rate != rate:
                bucket = self._advertised[kind] = TokenBucket(rate, max(1.0, rate * BURST_S), now)
                self._advertised_by[kind] = (
                    f"the endpoint's x-ratelimit-limit-{kind} header ({limit.limit:g} a minute, "
                    f"shared by {self._workers} worker processes)"
                )
                self._learnt = None  # the endpoint says its limit: nothing to learn
            bucket.lower_to(limit.remaining / self._workers, now)


def _count(usage: Mapping[str, Any] | None, name: str) -> int | None:
    value = usage.get(name) if usage is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
