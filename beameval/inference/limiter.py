"""Per-endpoint adaptive concurrency (AIMD): fewer requests to an overloaded endpoint, never more than parallelism."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from types import TracebackType

from beameval.inference.classify import Failure

__all__ = ["RAMP_S", "AdaptiveLimiter"]

#: Seconds over which slow start, while every slot is taken, opens the rest of them without a reply.
RAMP_S = 0.1


class AdaptiveLimiter:
    """An asyncio concurrency limit that adapts to overload signals (AIMD).

    The limit is a hard cap on requests in flight: ``slot()`` waits (FIFO) while
    ``in_flight >= limit``, and ``1 <= limit <= max_limit`` always holds.

    Rule:

    * Slow start: begin at ``min(max_limit, initial_limit)`` (32 by default) and add 1 per
      success (the limit doubles every round trip) until the first overload or
      ``max_limit``. A healthy endpoint reaches 64 after one round trip; an endpoint that
      takes only 16 sees one burst of 16 overload replies, not 48 (which, with a
      one-second ``Retry-After``, made a capacity-limited run's rate swing from 186 to
      241 rows/s between runs when the limit started at 64). Starting at 8 instead cost
      every run three round trips of ramp, 1.5-3% of a 14 s run at 100 ms with 2
      processes, for no gain against that endpoint (242 rows/s, slowest of three, both).
    * Ramp: with ``on_ramp`` given, while slow start has every slot taken the limit also
      grows by one every ``RAMP_S / (max_limit - initial_limit)`` seconds, reaching
      ``max_limit`` within ``RAMP_S`` without a reply, and stops at the first overload: a
      refusal at admission (429 or 503 before any work, as gateways and capacity limits
      answer) comes back within a network round trip, a step or two, while a healthy
      endpoint no longer gets a half-empty first round trip (at 200 ms and ``parallelism``
      64, 1,000 rows took 17 round trips instead of 16: 0.897 of the ideal rate, now 0.93-0.94).
      Only while full: a pacer holding requests back (the lone first request, a rate) is
      not the limit's evidence of anything.
    * Decrease: hard overload (429, 503) takes 30% off, ``max(1, min(limit - 1, int(limit * 0.7)))``
      (CUBIC's factor: halving left a 16-request endpoint at 8 for two round trips of every
      cycle, 194 rows/s against 212 with 0.7, measured with 2,000 requests at 50 ms);
      soft overload (timeouts) takes a fifth off, ``max(1, min(limit - 1, int(limit * 0.8)))``.
      Either remembers the limit before the decrease as ``w_max``, the last overload point.
    * At most one decrease per window: a decrease opens a window that stays open until
      every request that was in flight at the time of the decrease has finished. Overload
      replies and successes recorded while it is open are ignored, so a burst of 429s from
      one round trip cuts the limit once, and replies to requests sent under the old
      limit can neither cut it again nor undo the cut.
    * Additive increase, outside a window: +1 after every N successes, where

      - ``N = limit`` (about +1 per round trip) when ``w_max >= 8`` and
        ``w_max - m <= limit < w_max - 1``, with ``m = w_max // 8``: approaching the last
        overload point;
      - ``N = 2 * limit`` (+1 per two round trips) when ``w_max >= 8`` and
        ``w_max - 1 <= limit <= w_max + m``: probing at and just past it;
      - ``N = max(1, limit // growth_divisor)`` (about +8 per round trip by default)
        otherwise: fast recovery after a cut, and fast growth once well past ``w_max``
        (the endpoint got more capacity). From 1 back to 64 takes 10 round trips.
        During slow start, ``N = 1``.
    * Transient and fatal failures leave the limit alone.

    Against an endpoint that answers 429 above K requests in flight (K=16, limit 64) this
    settles into a cycle of about 11, 15, 16, 16, 16, 17 (limits sampled by
    round trip): about 0.9 K requests in flight on average, one cut per cycle.

    All methods must be called from the event loop that runs the requests, and
    ``record`` while the attempt still holds its slot.

    Args:
        max_limit: the cap (``params.parallelism``), at least 1.
        initial_limit: where slow start begins.
        on_ramp: called on the loop after each ramp step (which may let a queued request
            start); returns whether requests still wait for the limit. None: no ramp.
        growth_divisor: in the fast region, successes per +1 are ``limit // growth_divisor``.
        soft_factor: multiplicative decrease on soft overload.
        hard_factor: multiplicative decrease on hard overload.

    """

    __slots__ = (
        "_credit",
        "_growth_divisor",
        "_in_flight",
        "_slow_start",
        "_limit",
        "_next_ticket",
        "_on_ramp",
        "_ramp_step",
        "_ramping",
        "_hard_factor",
        "_soft_factor",
        "_waiters",
        "_w_max",
        "_window_end",
        "_window_remaining",
        "decreases",
        "ignored",
        "max_limit",
        "peak",
    )

    def __init__(
        self,
        max_limit: int,
        *,
        initial_limit: int = 32,
        growth_divisor: int = 8,
        soft_factor: float = 0.8,
        hard_factor: float = 0.7,
        on_ramp: Callable[[], bool] | None = None,
    ) -> None:
        if max_limit < 1:
            raise ValueError(f"max_limit must be at least 1, got {max_limit}")
        self.max_limit = max_limit
        self._limit = max(1, min(max_limit, initial_limit))
        self._slow_start = True
        self._on_ramp = on_ramp
        self._ramp_step = RAMP_S / max(1, max_limit - self._limit)
        self._ramping = False
        self._growth_divisor = max(1, growth_divisor)
        self._soft_factor = soft_factor
        self._hard_factor = hard_factor
        self._in_flight = 0
        self._credit = 0
        self._next_ticket = 0
        self._window_end = 0
        self._window_remaining = 0
        self._w_max = 0
        self._waiters: deque[asyncio.Future[int]] = deque()
        self.peak = 0
        self.decreases = 0
        self.ignored = 0

    @property
    def limit(self) -> int:
        """The current cap on requests in flight."""
        return self._limit

    @property
    def in_flight(self) -> int:
        """Requests holding a slot now."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Callers queued for a slot."""
        return sum(1 for fut in self._waiters if not fut.done())

    @property
    def in_window(self) -> bool:
        """True while a decrease's window is open (further decreases are ignored)."""
        return self._window_remaining > 0

    def slot(self) -> _Slot:
        """Return an async context manager holding one in-flight slot: ``async with limiter.slot():``."""
        return _Slot(self)

    def record(self, failure: Failure | None) -> None:
        """Feed back the result of one attempt: None for success, else its classified failure."""
        if failure is None:
            if self._window_remaining > 0 or self._limit >= self.max_limit:
                return
            self._credit += 1
            if self._credit >= self._successes_per_step():
                self._credit = 0
                self._limit += 1
                self._wake()
            return
        kind = failure.failure_class
        if kind == "hard_overload":
            new_limit = max(1, min(self._limit - 1, int(self._limit * self._hard_factor)))
        elif kind == "soft_overload":
            new_limit = max(1, min(self._limit - 1, int(self._limit * self._soft_factor)))
        else:
            return
        if self._window_remaining > 0:
            self.ignored += 1
            return
        self.decreases += 1
        self._slow_start = False
        self._w_max = self._limit
        self._limit = new_limit
        self._credit = 0
        self._window_end = self._next_ticket
        self._window_remaining = self._in_flight

    def _ramp(self) -> None:
        """One ramp step, while slow start lasts and every slot is taken; then the next, while requests wait."""
        if self._slow_start and self._in_flight >= self._limit and self._limit < self.max_limit:
            self._limit += 1
            self._wake()  # _ramping stays set: a slot granted here must not start a second clock
            if self._on_ramp is not None and self._on_ramp():
                asyncio.get_running_loop().call_later(self._ramp_step, self._ramp)
                return
        self._ramping = False

    def _successes_per_step(self) -> int:
        if self._slow_start:
            return 1
        limit, w_max = self._limit, self._w_max
        margin = max(1, w_max // 8)
        if w_max >= 8 and w_max - margin <= limit <= w_max + margin:
            # near the last overload point: +1 per round trip, +1 per two at or above it
            return limit if limit < w_max - 1 else 2 * limit
        return max(1, limit // self._growth_divisor)

    def _grant(self) -> int:
        self._in_flight += 1
        if self._in_flight > self.peak:
            self.peak = self._in_flight
        if self._in_flight >= self._limit and self._slow_start and not self._ramping and self._on_ramp is not None:
            self._ramping = True  # full: the ramp's clock runs
            asyncio.get_running_loop().call_later(self._ramp_step, self._ramp)
        ticket = self._next_ticket
        self._next_ticket = ticket + 1
        return ticket

    def _release(self, ticket: int) -> None:
        self._in_flight -= 1
        if ticket < self._window_end and self._window_remaining > 0:
            self._window_remaining -= 1
        if self._waiters:
            self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters and self._in_flight < self._limit:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(self._grant())

    async def _acquire(self) -> int:
        if self._in_flight < self._limit and not self._waiters:
            return self._grant()
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # the slot was handed over as we were cancelled
                self._release(fut.result())
            raise


class _Slot:
    """One ``async with`` use of the limiter."""

    __slots__ = ("_limiter", "_ticket")

    def __init__(self, limiter: AdaptiveLimiter) -> None:
        self._limiter = limiter
        self._ticket = -1

    async def __aenter__(self) -> _Slot:
        self._ticket = await self._limiter._acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._limiter._release(self._ticket)
