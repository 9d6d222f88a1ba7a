"""One rate for every worker of a job: the generic cell rate algorithm (GCRA) kept in Redis.

GCRA (ITU-T I.371; the algorithm of redis-cell and of the ``throttled`` library) keeps
one number per limit, the theoretical arrival time (TAT): the moment the limit would be
back to idle. A send of cost ``c`` under an emission interval ``i`` (seconds per unit:
60 / R for requests) and a burst tolerance ``τ`` may go when ``TAT + min(c·i, τ) − τ <=
now``, and moves the TAT to ``max(TAT, now) + c·i``. That is a token bucket of
``τ / i`` units refilled at ``1 / i`` units a second, held in one key that expires by
itself. The check and the update of the request and token keys run in one Lua script,
so Redis applies them atomically for every worker, on Redis's own clock (``TIME``), so
the workers' clocks never matter. The keys share a hash tag (``{name}``), so the script
also runs on a Redis Cluster. The client is redis-py's asyncio client; a script goes as
EVALSHA, and as SCRIPT LOAD + EVALSHA the first time a Redis has not seen it, and calls
TIME, GET and SET, so a Redis ACL user needs ``ACL_RULES`` (``check_shared``, the
preflight, runs both scripts exactly so).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable

import redis
import redis.asyncio

from beameval.inference.not_sent import QuotaStoreLost

__all__ = ["ACL_RULES", "KEY_PREFIX", "SharedGate", "SharedRate", "check_shared", "shared_name"]

log = logging.getLogger(__name__)

#: Seconds a Redis call may take before it counts as unreachable.
REDIS_TIMEOUT_S = 2.0
#: Every key the scripts touch starts with this (what a Redis ACL must allow).
KEY_PREFIX = "beameval:rate:"
#: What a Redis ACL user needs to run the scripts (``ACL SETUSER NAME on >PASSWORD`` + these).
ACL_RULES = f"+evalsha +script|load +time +get +set ~{KEY_PREFIX}*"
#: The first and the longest pause between two tries of an unreachable Redis.
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 5.0

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local wait = 0
local tats = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[3 * i - 2])
  local tolerance = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then tat = now end
  local allow_at = tat + math.min(cost * interval, tolerance) - tolerance
  if allow_at - now > wait then wait = allow_at - now end
  tats[i] = tat + cost * interval
end
if wait > 0 then return math.ceil(wait) end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, string.format('%.0f', tats[i]), 'PX', math.ceil((tats[i] - now) / 1000) + 60000)
end
return 0
"""

_ADJUST = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
tat = tat + tonumber(ARGV[1]) * tonumber(ARGV[2])
if tat < now then tat = now end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 60000)
return 0
"""


def shared_name(shared_key: str | None, job: str, endpoint_key: str) -> str:
    """The budget's name in Redis: the configured ``shared_key``, else one per run and endpoint."""
    if shared_key:
        return shared_key
    digest = hashlib.sha256(endpoint_key.encode("utf-8")).hexdigest()[:16]
    return f"{job}:{digest}"


class SharedRate:
    """The requests and tokens rates of one endpoint, drawn from by every worker through one Redis.

    Args:
        url: ``redis://HOST:PORT/DB``.
        password: sent with AUTH when given.
        name: the budget's name (``shared_name``).
        requests_per_s: the job's request rate, or None.
        tokens_per_s: the job's token rate, or None.
        burst_s: the burst tolerance, in seconds of each rate.

    """

    def __init__(
        self,
        url: str,
        password: str | None,
        name: str,
        requests_per_s: float | None,
        tokens_per_s: float | None,
        burst_s: float,
    ) -> None:
        self._url = url
        self._password = password
        self._keys: list[str] = []
        self._limits: list[tuple[float, float]] = []  # (interval µs, tolerance µs) per key
        self._token_index: int | None = None
        tolerance = burst_s * 1e6
        if requests_per_s is not None:
            self._keys.append(f"{KEY_PREFIX}{{{name}}}:requests")
            self._limits.append((1e6 / requests_per_s, tolerance))
        if tokens_per_s is not None:
            self._token_index = len(self._keys)
            self._keys.append(f"{KEY_PREFIX}{{{name}}}:tokens")
            self._limits.append((1e6 / tokens_per_s, tolerance))
        self._client: redis.asyncio.Redis | None = None
        self._acquire: object = None
        self._adjust: object = None

    def _open(self) -> redis.asyncio.Redis:
        """The client, created on the loop that first uses it (redis-py's asyncio pool belongs to one loop)."""
        if self._client is None:
            self._client = redis.asyncio.Redis.from_url(
                self._url,
                password=self._password,
                socket_timeout=REDIS_TIMEOUT_S,
                socket_connect_timeout=REDIS_TIMEOUT_S,
            )
            self._acquire = self._client.register_script(_ACQUIRE)
            self._adjust = self._client.register_script(_ADJUST)
        return self._client

    async def wait(self, tokens: float) -> float:
        """Take one request and ``tokens`` if both can go now (returns 0), else the seconds to wait (takes nothing).

        Raises:
            redis.RedisError, OSError: Redis cannot be reached or refused the script.
        """
        self._open()
        args: list[float] = []
        for index, (interval, tolerance) in enumerate(self._limits):
            cost = tokens if index == self._token_index else 1
            args += [interval, tolerance, math.ceil(cost)]
        waited = await self._acquire(keys=self._keys, args=args)  # type: ignore[operator]
        return int(waited) / 1e6

    async def adjust_tokens(self, extra: float) -> None:
        """Charge ``extra`` more tokens (negative gives back): the reply's usage replaces the estimate."""
        if self._token_index is None or not extra:
            return
        self._open()
        interval = self._limits[self._token_index][0]
        await self._adjust(keys=[self._keys[self._token_index]], args=[interval, math.floor(extra)])  # type: ignore[operator]

    async def aclose(self) -> None:
        """Close the connection pool."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


class SharedGate:
    """``SharedRate`` as one worker uses it: closed while Redis is away, lost after ``timeout`` seconds of it.

    A failed call (refused, timed out, or an error reply) opens an outage at the moment
    the call started; ``wait`` then asks the caller to pause (``RETRY_FIRST_S``, doubling
    to ``RETRY_MAX_S``) and try again, sending nothing meanwhile. A call that succeeds
    ends the outage. Once an outage has lasted ``timeout`` seconds, every later ``wait``
    raises ``QuotaStoreLost``: the endpoint is done for this worker (the run stops).

    Args:
        rate: the shared budget.
        url: the Redis URL (for messages; it never holds a password).
        timeout: ``rate_limit.shared_timeout``.
        endpoint: names the endpoint in messages.
        clock: a monotonic clock in seconds.

    """

    def __init__(
        self,
        rate: SharedRate,
        url: str,
        timeout: float,
        endpoint: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self._url = url
        self._timeout = timeout
        self._endpoint = endpoint
        self._clock = clock
        self._down_since: float | None = None
        self._tries = 0
        self.lost: str | None = None
        self.outages = 0

    async def wait(self, tokens: float) -> tuple[float, bool]:
        """Take one request and ``tokens`` now (0, False), or the seconds to wait and whether Redis is away.

        Raises:
            QuotaStoreLost: Redis has been away for ``timeout`` seconds (now or before).
        """
        if self.lost is not None:
            raise QuotaStoreLost(self.lost, _LOST_HINT)
        started = self._clock()
        try:
            wait = await self.rate.wait(tokens)
        except Exception as exc:  # noqa: BLE001 - redis raises RedisError, OSError, timeouts
            return self._away(exc, started), True
        if self._down_since is not None:
            log.warning(
                "the shared rate limit's Redis (%s) answers again after %.1f s; sending to %s again",
                self._url,
                self._clock() - self._down_since,
                self._endpoint,
            )
            self._down_since = None
        return wait, False

    def _away(self, exc: BaseException, started: float) -> float:
        cause = f"{type(exc).__name__}: {exc}"
        if self._down_since is None:
            self._down_since, self._tries = started, 0
            self.outages += 1
            log.warning(
                "the shared rate limit's Redis (%s) does not answer (%s); this worker sends nothing new to %s "
                "until it does, and stops after %g s (rate_limit.shared_timeout)",
                self._url,
                cause,
                self._endpoint,
                self._timeout,
            )
        self._tries += 1
        away = self._clock() - self._down_since
        if away >= self._timeout:
            self.lost = (
                f"not sent: the shared rate limit's Redis ({self._url}) did not answer for {away:.0f} s "
                f"(rate_limit.shared_timeout is {self._timeout:g} s; last: {cause}), so nothing more is sent "
                f"to {self._endpoint}: without it this worker cannot know the job's rate"
            )
            raise QuotaStoreLost(self.lost, _LOST_HINT)
        pause = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** min(self._tries - 1, 16))
        return min(pause, self._timeout - away)


_LOST_HINT = "Bring the Redis back (or fix the network to it), then rerun the same command with --resume."


def check_shared(url: str, password: str | None) -> None:
    """Run both scripts once on a key of their own, synchronously, as a worker will (the preflight).

    The acquire charges nothing and the adjust adds nothing, so no run's budget moves; what
    is checked is what a worker needs: the server answers, takes the credentials, lets the
    user run EVALSHA (and SCRIPT LOAD when the script is new to it) on ``beameval:rate:*``.

    Raises:
        redis.RedisError, OSError: it cannot be reached, refused AUTH, or refused a script.
    """
    client = redis.Redis.from_url(
        url, password=password, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
    )
    key = f"{KEY_PREFIX}{{preflight}}:requests"
    try:
        client.register_script(_ACQUIRE)(keys=[key], args=[1e6, 1e6, 0])
        client.register_script(_ADJUST)(keys=[key], args=[1e6, 0])
    finally:
        client.close()
