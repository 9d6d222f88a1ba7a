"""The evaluation config file: pydantic models, loading, and readable validation errors.

Every model is frozen and rejects unknown keys. Metric entries are validated by the
config class their ``type`` names in the metric registry, so adding a metric never
touches this module.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from core.errors import ConfigError, EvaluatorError
from core.validators import env_var_name, http_url
from metrics.base import MetricConfig, config_model

__all__ = [
    "AgentTarget",
    "DatasetConfig",
    "EvalConfig",
    "InferenceParams",
    "ModelTarget",
    "Params",
    "ReasoningParams",
    "TargetConfig",
    "load_config",
    "parse_config",
]

_AUTH_WORDS = ("auth", "token", "key", "secret", "credential", "bearer", "cookie")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetConfig(_Frozen):
    """Where the rows come from."""

    path: str
    format: Literal["auto", "jsonl", "parquet", "csv"] = "auto"


class ReasoningParams(_Frozen):
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


class ModelTarget(_Frozen):
    """An OpenAI-compatible model endpoint."""

    url: str
    name: str
    format: Literal["openai", "nim"] = "nim"
    api_key_env: str | None = None
    default_headers: dict[str, str] | None = None

    _url = field_validator("url")(http_url)
    _key = field_validator("api_key_env")(env_var_name)

    @field_validator("default_headers")
    @classmethod
    def _no_credentials_in_headers(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        for name in headers or {}:
            normalised = name.lower().replace("_", "-")
            if any(word in normalised for word in _AUTH_WORDS):
                raise ValueError(
                    f"header {name!r} looks like a credential (names containing "
                    f"{', '.join(_AUTH_WORDS)} are refused); put the key in an environment "
                    "variable and name it in api_key_env"
                )
        return headers


class AgentTarget(_Frozen):
    """A generic agent endpoint: POST a templated JSON body, read the answer by JSONPath."""

    url: str
    name: str = "agent"
    body: dict[str, Any]
    response_path: str
    trajectory_path: str | None = None
    api_key_env: str | None = None

    _url = field_validator("url")(http_url)
    _key = field_validator("api_key_env")(env_var_name)


class TargetConfig(_Frozen):
    """Exactly one of ``model`` or ``agent``."""

    model: ModelTarget | None = None
    agent: AgentTarget | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> TargetConfig:
        if (self.model is None) == (self.agent is None):
            raise ValueError("set exactly one of target.model or target.agent")
        return self

    @property
    def endpoint(self) -> ModelTarget | AgentTarget:
        """Whichever of ``model`` or ``agent`` is set."""
        endpoint = self.model or self.agent
        assert endpoint is not None  # guaranteed by _exactly_one
        return endpoint

    def api_key(self) -> str | None:
        """The API key from the environment variable named in ``api_key_env``, if any."""
        name = self.endpoint.api_key_env
        return os.environ.get(name) if name else None


class Params(_Frozen):
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


class EvalConfig(_Frozen):
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
                raise ConfigError(_format_errors(exc, prefix=f"metrics.{position}")) from None
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
        raise ConfigError(f"{source} is invalid: {_format_errors(exc)}") from None
    except EvaluatorError as exc:
        raise ConfigError(f"{source} is invalid: {exc.message}", hint=exc.hint) from None


def load_config(path: str) -> EvalConfig:
    """Read and validate a YAML or JSON config file.

    Raises:
        ConfigError: the file is missing, unparseable or invalid.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path!r} is not UTF-8 text (byte {exc.start}); it must be a YAML or JSON file."
        ) from None
    try:
        data = json.loads(text) if file.suffix.lower() == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config file {path!r} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path!r} is not valid YAML/JSON: {_yaml_problem(exc)}.") from None
    return parse_config(data, source=f"config file {path!r}")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line: what is wrong and where (PyYAML's own text spans several)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        context = f" ({exc.context})" if exc.context else ""
        return f"{exc.problem}{context}{where}"
    return " ".join(str(exc).split())


def _format_errors(exc: ValidationError, prefix: str = "") -> str:
    messages = []
    for error in exc.errors():
        location = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        location = re.sub(r"\.(function-after|function-before)\[[^\]]*\]", "", location)
        if error["type"] == "extra_forbidden":
            messages.append(f"unknown key '{location}' (check its spelling; unknown keys are refused)")
        elif error["type"] == "missing":
            messages.append(f"missing required key '{location}'")
        else:
            text = error["msg"].removeprefix("Value error, ")
            given = "" if error["type"] == "value_error" else _given(error)
            messages.append(f"'{location}': {text}{given}")
    return "; ".join(messages) + "."


def _given(error: Any) -> str:
    value = error.get("input")
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return f" (got {value!r})"
    return ""
