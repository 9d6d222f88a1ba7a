"""A request rate learnt from 429 replies, for an endpoint that limits requests and says nothing else.

Many gateways (and vLLM behind a proxy) answer 429, with or without ``Retry-After``, and
send no ``x-ratelimit-*`` header; with no ``rate_limit`` configured either, the adaptive
concurrency limit alone kept meeting them: a limit per minute is a rate, and fewer
requests in flight at a short latency is still far above it (at ``parallelism`` 64,
1,429 of ~1,800 answers were 429 and 332 of 400 rows failed). So the pacer learns a
rate, as the AWS SDKs' "adaptive" retry mode does (CUBIC applied to the send rate,
``botocore/retries/adaptive.py``), with three changes measured against the test server:

* **Arm**: the first 429 only arms the learning: a lone refusal (one 429 with its
  ``Retry-After``, then ``RECOVERY_REPLIES`` answers) teaches nothing and paces nothing.
* **Cut**: the next 429, then any 429 to a request sent after the last cut, remembers
  ``w_max``, the lower of the current rate and the rate this worker actually sent at
  over the last ``WINDOW_S`` (or since that request went, for a slow reply), and sets
  the rate to ``DECREASE`` × ``w_max``. Only one cut per round trip (botocore cuts on
  every 429: one burst of twelve took the rate to 1% of the limit), since the replies to
  requests sent under the old rate say nothing about the new one. The bucket starts
  empty, so what follows the cut is spaced at once.
* **Only a rate, once learnt**: a 429 to a request sent with more than ``LOWER_IN_FLIGHT``
  of the requests in flight (this worker's, itself included) that the arming 429's
  request went with neither cuts the rate nor restarts its recovery. Slow start's first
  burst looks the same from a rate limit and from a cap on requests *in flight*, so the
  rate is learnt from it either way; but a concurrency cap refuses only requests past
  it, with as many in flight as at first, each time the adaptive concurrency limit
  overshoots (one round trip in about six), while a rate limit, once paced, refuses
  requests sent with few in flight (2-4 against the arming 429's 21, at 1,200 a minute
  and 50 ms). Those overshoots used to cut the rate every ~90 answers, before its
  recovery took it past ``w_max``: capacity 16, 50 ms, ``Retry-After`` 1 s, parallelism
  64 reached 153-162 rows/s busy (7.8-8.2 of 16 in flight on average) against a floor of
  192. Ignored, the rate climbs out of the way and the concurrency limit alone keeps
  the cap.
* **Raise**: CUBIC's curve, counted in answered requests rather than seconds (so the
  share of 429s, not their number a second, is what it keeps low at any rate): after n
  2xx replies the rate is ``w_max`` × (1 − (1 − ``DECREASE``) × (1 − n/N)³) with
  N = ``RECOVERY_REPLIES``: quickly back towards ``w_max``, flat around it, then probing
  above it ever faster. It never exceeds twice the rate actually sent over the last
  second (botocore's rule, so an unused rate does not run away) unless that would take
  it below where the cut left it, and never falls below ``MIN_PER_S``.

Against the test server at 1,200 requests a minute (one second of burst, 50 ms
answers) at ``parallelism`` 64, 600 requests: every one ok, at the limit's rate, 22
answered 429 from one worker and 62 from two; most of them (14 and 55) in the first two
seconds, the first round trip's W × 32 requests (the concurrency limit's slow start)
sent before anything was known, then one 429 every few seconds.
"""

from __future__ import annotations

import math
from collections import deque

from beameval.inference.token_bucket import TokenBucket

__all__ = ["DECREASE", "RECOVERY_REPLIES", "LearntRate"]

#: The share of ``w_max`` kept after a 429 (CUBIC's beta, as botocore's).
DECREASE = 0.7
#: Answered requests from a cut back to ``w_max`` (CUBIC's K, counted in replies). 40 cut twice as often
#: in steady state (15 against 7 429s in 600 requests from 2 workers), for no more utilisation.
RECOVERY_REPLIES = 80
#: Once a rate is learnt, a 429 cuts it only if its request went with at most this share of the arming 429's
#: requests in flight (the concurrency limit's own cut, 0.7: a concurrency cap refuses nothing below it).
LOWER_IN_FLIGHT = 0.7
#: The slowest learnt rate: one request a minute.
MIN_PER_S = 1 / 60
#: Seconds over which the rate actually sent is measured.
WINDOW_S = 1.0
#: Seconds of the learnt rate one worker may send at once.
BURST_S = 0.5


class LearntRate:
    """One worker's learnt request rate for one endpoint (``bucket`` is None until the first 429)."""

    __slots__ = ("_answered", "_armed", "_armed_in_flight", "_cut_at", "_sent", "_w_max", "bucket", "cuts")

    def __init__(self) -> None:
        self.bucket: TokenBucket | None = None
        self.cuts = 0
        self._cut_at = 0
        self._w_max = 0.0
        self._answered = 0  # 2xx replies since the last cut (or since armed)
        self._armed = False  # a first 429 seen, no rate yet
        self._armed_in_flight = 0  # requests in flight when the arming 429's request went
        self._sent: deque[float] = deque()

    @property
    def rate(self) -> float | None:
        """Requests a second now, or None before the first 429."""
        return None if self.bucket is None else self.bucket.rate

    def sent(self, now: float) -> None:
        """Count one request let through at ``now``."""
        self._sent.append(now)
        self._trim(now)

    def answered(self, now: float) -> None:
        """A 2xx: move along the recovery curve."""
        self._answered += 1
        bucket = self.bucket
        if bucket is None:
            if self._answered > RECOVERY_REPLIES:
                self._armed = False  # that 429 stayed alone: nothing to learn from it
            return
        x = self._answered / RECOVERY_REPLIES - 1.0
        rate = self._w_max * (1.0 + (1.0 - DECREASE) * x * x * x)
        self._trim(now)
        floor = DECREASE * self._w_max  # a quiet second must not pull the rate below where the cut left it
        rate = max(floor, min(rate, 2.0 * len(self._sent) / WINDOW_S))
        bucket.retune(rate, _capacity(rate), now)

    def refused(self, seq: int, sent_at: float, next_seq: int, now: float, in_flight: int = 1) -> None:
        """A 429 to the request admitted as number ``seq`` at ``sent_at`` (``next_seq``: the next number to give).

        ``in_flight``: this worker's requests in flight when it went, itself included. The rate
        sent is measured over the last ``WINDOW_S``, or since that request went when it went
        earlier (a slow reply): never over a window that holds none of the requests.
        """
        if self.bucket is None and not self._armed:
            self._armed = True  # one 429 may be a passing refusal; a second is a limit
            self._armed_in_flight = in_flight
            self._answered = 0
            return
        if self.bucket is not None and in_flight > max(1, int(LOWER_IN_FLIGHT * self._armed_in_flight)):
            return  # as many in flight as when the 429s began: a concurrency cap's overshoot, the limiter's
        if seq < self._cut_at:
            return  # sent under the rate before the last cut: that cut already answered for it
        self._cut_at = next_seq
        self._answered = 0
        self._trim(now)
        since = now - sent_at
        sent = (next_seq - seq) / since if since > WINDOW_S else max(1, len(self._sent)) / WINDOW_S
        current = math.inf if self.bucket is None else self.bucket.rate
        self._w_max = max(MIN_PER_S, min(current, sent))
        rate = max(MIN_PER_S, DECREASE * self._w_max)
        if self.bucket is None:
            self.bucket = TokenBucket(rate, _capacity(rate), now)
        else:
            self.bucket.retune(rate, _capacity(rate), now)
        self.bucket.lower_to(0.0, now)
        self.cuts += 1

    def _trim(self, now: float) -> None:
        sent, since = self._sent, now - WINDOW_S
        while sent and sent[0] < since:
            sent.popleft()


def _capacity(rate: float) -> float:
    return max(1.0, rate * BURST_S)
