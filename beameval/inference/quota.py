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
        budget: the run's whole budget (every endpoint together), or None.
        workers: W, the worker processes splitting the rates and the budget.
        job: names the run, so shared budgets and process budgets are per run.

    """

    rate_limit: RateLimit | None = None
    pricing: Pricing | None = None
    budget: Budget | None = None
    workers: int = 1
    job: str = ""

    @classmethod
    def of(cls, access: EndpointAccess, params: Params, job: str) -> EndpointQuota:
        """The quota of the endpoint ``access`` in run ``job`` (W from ``params.worker_processes``, else 1)."""
        return cls(access.rate_limit, access.pricing, params.budget, params.worker_processes or 1, job)


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
