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
also runs on a Redis Cluster. The client is redis-py's asyncio client.
"""

from __future__ import annotations

import hashlib
import math

import redis
import redis.asyncio

__all__ = ["SharedRate", "check_reachable", "shared_name"]

#: Seconds a Redis call may take before it counts as unreachable.
REDIS_TIMEOUT_S = 2.0

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
            self._keys.append(f"beameval:rate:{{{name}}}:requests")
            self._limits.append((1e6 / requests_per_s, tolerance))
        if tokens_per_s is not None:
            self._token_index = len(self._keys)
            self._keys.append(f"beameval:rate:{{{name}}}:tokens")
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


def check_reachable(url: str, password: str | None) -> None:
    """PING ``url`` once, synchronously (the preflight).

    Raises:
        redis.RedisError, OSError: it cannot be reached, or refused AUTH.
    """
    client = redis.Redis.from_url(
        url, password=password, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
    )
    try:
        client.ping()
    finally:
        client.close()
