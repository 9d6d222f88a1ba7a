"""Run parameters (``params:``): concurrency, retries, timeouts and request parameters."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from beameval.config.frozen import Frozen

__all__ = ["InferenceParams", "Params", "ReasoningParams"]


class ReasoningParams(Frozen):
    """How to separate a model's reasoning from its answer."""

    end_token: str | None = None


class InferenceParams(BaseModel):
    """Request parameters; unknown keys are passed through to the endpoint verbatim."""

    model_config = ConfigDict(extra="allow", frozen=True)

    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    stop: list[str] | None = None

    @model_validator(mode="after")
    def _one_token_limit(self) -> InferenceParams:
        if self.max_tokens is not None and self.max_completion_tokens is not None:
            raise ValueError("set max_tokens or max_completion_tokens, not both")
        return self

    def as_request_params(self) -> dict[str, Any]:
        """The parameters to merge into each request (unset ones left out)."""
        return self.model_dump(exclude_none=True)


class Params(Frozen):
    """Run parameters (``params:``)."""

    parallelism: Annotated[int, Field(ge=1, le=4096)] = 8
    max_retries: Annotated[int, Field(ge=0, le=100)] = 3
    request_timeout: Annotated[float, Field(gt=0)] | None = 120.0
    ignore_request_failure: bool = False
    limit_samples: Annotated[int, Field(ge=1)] | None = None
    system_prompt: str | None = None
    inference: InferenceParams | None = None
    reasoning: ReasoningParams | None = None
    structured_output: dict[str, Any] | None = None

    @field_validator("request_timeout")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value
