"""What one endpoint's pacer needs to know: its rate limit and pricing, the run's budget and the worker count.

Built by the Beam stages from the config (``EndpointQuota.of``) and handed to
``InferenceEngine.shared``; hashable, so engines are shared per endpoint and quota.
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

__all__ = ["EndpointQuota", "endpoints_of", "redis_password"]


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
