"""The evaluation config file's schema: the whole ``EvalConfig`` and its validation.

Every model is frozen and rejects unknown keys. Metric entries are validated by the
config class their ``type`` names in the metric registry, so adding a metric never
touches this module.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from beameval.config.endpoints import TargetConfig
from beameval.config.errors import format_errors
from beameval.config.frozen import Frozen
from beameval.config.params import Params
from beameval.core.errors import ConfigError, EvaluatorError
from beameval.metrics.base import MetricConfig
from beameval.metrics.registry import config_model

__all__ = ["DatasetConfig", "EvalConfig", "parse_config"]


class DatasetConfig(Frozen):
    """Where the rows come from."""

    path: str
    format: Literal["auto", "jsonl", "parquet", "csv"] = "auto"


class EvalConfig(Frozen):
    """The whole config file."""

    dataset: DatasetConfig
    target: TargetConfig | None = None
    prompt_template: str | dict[str, Any] | None = None
    params: Params = Params()
    metrics: Annotated[list[MetricConfig], Field(min_length=1)]

    @field_validator("metrics", mode="before")
    @classmethod
    def _validate_each_metric(cls, raw: Any) -> Any:
        if not isinstance(raw, list):
            return raw
        parsed = []
        for position, entry in enumerate(raw):
            if not isinstance(entry, dict) or "type" not in entry:
                raise ValueError(f"metrics[{position}] must be a mapping with a 'type' key")
            try:
                parsed.append(config_model(entry["type"]).model_validate(entry))
            except ValidationError as exc:
                raise ConfigError(format_errors(exc, prefix=f"metrics.{position}")) from None
        return parsed

    @model_validator(mode="after")
    def _online_needs_prompt(self) -> EvalConfig:
        if self.target is not None and self.target.agent is None and self.prompt_template is None:
            raise ValueError(
                "prompt_template is required with a model target, e.g. "
                "{messages: [{role: user, content: '{{ item.question }}'}]}"
            )
        return self

    def public_dump(self) -> dict[str, Any]:
        """The resolved config as JSON-ready data. Holds env-var names only, never secrets."""
        return self.model_dump(mode="json", exclude={"target": {"model": {"default_headers"}}})


def parse_config(data: Any, source: str = "config") -> EvalConfig:
    """Validate already-loaded config data.

    Raises:
        ConfigError: one message listing every invalid key path and why.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must be a mapping at the top level, got {type(data).__name__}.")
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source} is invalid: {format_errors(exc)}") from None
    except EvaluatorError as exc:
        raise ConfigError(f"{source} is invalid: {exc.message}", hint=exc.hint) from None
