"""Run parameters (``params:``): concurrency, retries, timeouts and request parameters."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import Field, field_validator

from beameval.config.frozen import Frozen
from beameval.config.inference import InferenceParams
from beameval.config.quota import Budget

__all__ = ["InferenceParams", "Params", "ReasoningParams"]


class ReasoningParams(Frozen):
    """How to separate a model's reasoning from its answer."""

    end_token: str | None = None


_TIMEOUT_NOTE = "seconds per attempt, a total deadline (connect, send and read the whole reply); null means 600 s."


class Params(Frozen):
    """Run parameters (``params:``)."""

    parallelism: Annotated[int, Field(ge=1, le=4096)] = 8
    max_retries: Annotated[int, Field(ge=0, le=100)] = 3
    request_timeout: Annotated[Annotated[float, Field(gt=0)] | None, Field(description=_TIMEOUT_NOTE)] = 120.0
    #: The longest wait between attempts, in seconds; a longer ``Retry-After`` fails the request at once.
    max_retry_wait: Annotated[float, Field(ge=0, le=86400)] = 120.0
    ignore_request_failure: bool = False
    #: With ignore_request_failure, the largest share of failed rows a run may have and still exit 0.
    max_error_rate: Annotated[float, Field(ge=0, le=1)] | None = None
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

    @field_validator("request_timeout")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value
