"""Run parameters (``params:``): concurrency, retries, timeouts and request parameters."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import Field, PrivateAttr, field_validator

from beameval.config.frozen import Frozen
from beameval.config.inference import InferenceParams
from beameval.config.quota import Budget

__all__ = ["InferenceParams", "JobScope", "Params", "ReasoningParams"]


class ReasoningParams(Frozen):
    """How to separate a model's reasoning from its answer."""

    end_token: str | None = None


class JobScope(Frozen):
    """The job a run's workers belong to: set by the run (``pipeline.quota.job_config``), never in a config file.

    Attributes:
        id: the job's id: one per OUT_DIR, kept across ``--resume`` (it names the shared
            limits in Redis and the process's budget).
        invocation: this invocation's id (its budget leases).
        spend: the job's spend ledger (``OUT_DIR/_responses/spend``, a local folder), or None
            where workers cannot share one (each then keeps 1/W of the budget).

    """

    id: str
    invocation: str
    spend: str | None = None


_TIMEOUT_NOTE = "seconds per attempt, a total deadline (connect, send and read the whole reply); null means 600 s."


class Params(Frozen):
    """Run parameters (``params:``)."""

    parallelism: Annotated[int, Field(ge=1, le=4096)] = 8
    max_retries: Annotated[int, Field(ge=0, le=100)] = 3
    request_timeout: Annotated[Annotated[float, Field(gt=0)] | None, Field(description=_TIMEOUT_NOTE)] = 120.0
    #: The longest wait between attempts, in seconds; a longer ``Retry-After`` fails the request at once.
    max_retry_wait: Annotated[float, Field(ge=0, le=86400)] = 120.0
    ignore_request_failure: bool = False
    #: With ignore_request_failure, the largest share of failed rows a run may have and still exit 0
    #: (more than half failed is not an evaluation; 1 lets every run through).
    max_error_rate: Annotated[float, Field(ge=0, le=1)] = 0.5
    limit_samples: Annotated[int, Field(ge=1)] | None = None
    system_prompt: str | None = None
    inference: InferenceParams | None = None
    reasoning: ReasoningParams | None = None
    structured_output: dict[str, Any] | None = None
    #: Samples per row (docs/STATISTICS.md): each row is sent K times, sample_index 0..K-1.
    repeats: Annotated[int, Field(ge=1, le=10_000)] = 1
    #: The most the run may spend (tokens, dollars); past it no request is sent and the run stops (exit 5).
    budget: Budget | None = None
    #: Worker processes that split each endpoint's rate_limit and the budget (R/W); unset: from the runner.
    worker_processes: Annotated[int, Field(ge=1, le=1_000_000)] | None = None

    #: The job the workers belong to (``with_job``); not configuration, so never dumped or validated.
    _job: JobScope | None = PrivateAttr(None)

    @property
    def job(self) -> JobScope | None:
        """The job these parameters were given to the workers for (None: not set by a run)."""
        return self._job

    def with_job(self, job: JobScope, **update: Any) -> Params:
        """A copy for the workers of ``job`` (with ``update``'s fields changed, unvalidated)."""
        params = self.model_copy(update=update)
        params._job = job
        return params

    @field_validator("request_timeout")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value
