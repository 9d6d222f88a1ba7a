"""What one endpoint's pacer needs to know: its rate limit and pricing, the run's budget and the worker count.

Built by the Beam stages from the config (``EndpointQuota.of``) and handed to
``InferenceEngine.shared``; hashable, so engines are shared per endpoint and quota. Also
the preflight's check that every ``rate_limit.shared`` Redis answers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from beameval.config.access import EndpointAccess
from beameval.config.params import Params
from beameval.config.quota import Budget, Pricing, RateLimit
from beameval.core.errors import ConfigError

__all__ = ["EndpointQuota", "check_shared_limits", "endpoints_of", "redis_password"]


@dataclass(frozen=True, slots=True)
class EndpointQuota:
    """One endpoint's limits as one worker process applies them.

    Attributes:
        rate_limit: the job's requests and tokens per minute, or None.
        pricing: dollars per million tokens, or None (costs 0).
        budget: the budget left to the job's workers (every endpoint together), or None.
        workers: W, the worker processes splitting the rates (and the budget, without a ledger).
        job: names the job (one per OUT_DIR, kept across ``--resume``), so the shared rate
            in Redis and the process's budget are the job's, whatever target or metric asks.
        ledger: the job's spend ledger folder, shared by the worker processes (None: each
            keeps 1/W of the budget).
        invocation: this invocation of the job (its leases in the ledger).

    """

    rate_limit: RateLimit | None = None
    pricing: Pricing | None = None
    budget: Budget | None = None
    workers: int = 1
    job: str = ""
    ledger: str | None = None
    invocation: str = ""

    @classmethod
    def of(cls, access: EndpointAccess, params: Params, job: str) -> EndpointQuota:
        """The quota of the endpoint ``access`` (W from ``params.worker_processes``, else 1).

        ``job`` names the run when the parameters carry no job (``Params.job``, set by
        the driver for the workers): every target and metric of a job then shares one.
        """
        scope = params.job
        if scope is None:
            return cls(access.rate_limit, access.pricing, params.budget, params.worker_processes or 1, job)
        return cls(
            access.rate_limit,
            access.pricing,
            params.budget,
            params.worker_processes or 1,
            scope.id,
            scope.spend,
            scope.invocation,
        )


def endpoints_of(config: BaseModel) -> Iterator[tuple[str, EndpointAccess]]:
    """Every endpoint config inside ``config`` (target, judge models, remote metrics), with its key path."""
    yield from _walk(config, "")


def _walk(value: Any, path: str) -> Iterator[tuple[str, EndpointAccess]]:
    if isinstance(value, EndpointAccess):
        yield path, value
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _walk(getattr(value, name), f"{path}.{name}" if path else name)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}.{index}")


def redis_password(rate_limit: RateLimit) -> str | None:
    """The Redis password from the variable named in ``shared_password_env``, if any."""
    return os.environ.get(rate_limit.shared_password_env) if rate_limit.shared_password_env else None


def check_shared_limits(config: BaseModel) -> None:
    """Fail fast when a ``rate_limit.shared`` Redis cannot be reached (the preflight's check).

    Raises:
        ConfigError: naming the endpoint, the Redis address and the cause.
    """
    shared: dict[str, tuple[str, RateLimit]] = {}
    for path, access in endpoints_of(config):
        limit = access.rate_limit
        if limit is not None and limit.shared is not None:
            shared.setdefault(limit.shared, (path, limit))
    if not shared:
        return
    from redis import RedisError  # only runs that share a limit load Redis (about 0.4 s of start-up)

    from beameval.inference.shared_rate import check_reachable

    for url, (path, limit) in shared.items():
        if limit.shared_password_env and not os.environ.get(limit.shared_password_env):
            raise ConfigError(
                f"preflight: {path}.rate_limit.shared_password_env names the environment variable "
                f"{limit.shared_password_env!r}, but it is not set; export it before running."
            )
        try:
            check_reachable(url, redis_password(limit))
        except (RedisError, OSError) as exc:
            raise ConfigError(
                f"preflight: cannot reach the Redis server that {path}.rate_limit.shared names "
                f"({url}): {type(exc).__name__}: {exc}. Every worker draws its request and token rate "
                "from it, so the run did not start.",
                hint="Start Redis there (redis-server --port PORT), fix the URL, or remove rate_limit.shared "
                "to split the rate evenly between the workers instead.",
            ) from None
