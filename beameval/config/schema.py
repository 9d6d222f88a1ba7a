"""The evaluation config file's schema: the whole ``EvalConfig`` and its validation.

Every model is frozen and rejects unknown keys. Metric entries are validated by the
config class their ``type`` names in the metric registry, so adding a metric never
touches this module.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializeAsAny, ValidationError, field_validator, model_validator

from beameval.config.cache import CacheConfig
from beameval.config.decide import DecideConfig
from beameval.config.endpoints import TargetConfig
from beameval.config.errors import format_errors
from beameval.config.frozen import Frozen
from beameval.config.params import Params
from beameval.config.statistics import StatisticsConfig
from beameval.config.targets import NamedTarget, check_target_names
from beameval.core.errors import ConfigError, EvaluatorError
from beameval.core.scoring import metric_keys
from beameval.metrics.base import MetricConfig
from beameval.metrics.registry import config_model

__all__ = ["DatasetConfig", "EvalConfig", "parse_config"]


class DatasetConfig(Frozen):
    """Where the rows come from."""

    path: str
    #: ``beir``: ``path`` is a BEIR folder, one row per judged query (``beameval.retrieval.beir``).
    format: Literal["auto", "jsonl", "parquet", "csv", "beir"] = "auto"
    #: A field that identifies each row (kept as the ``id`` column of rows/, and a natural --key for compare).
    id_field: str | None = None
    #: With ``format: beir``: the judgements file ``qrels/<split>.tsv`` (None: ``test``).
    split: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$")] | None = None

    @model_validator(mode="after")
    def _split_needs_beir(self) -> DatasetConfig:
        if self.split is not None and self.format != "beir":
            raise ValueError("split applies to format: beir (a BEIR folder's qrels/<split>.tsv); remove it")
        return self


class EvalConfig(Frozen):
    """The whole config file."""

    dataset: DatasetConfig
    target: TargetConfig | None = None
    #: Several named targets in one run (in place of ``target:``); see ``beameval.config.targets``.
    targets: list[NamedTarget] | None = None
    prompt_template: str | dict[str, Any] | None = None
    params: Params = Params()
    # SerializeAsAny: dumps (results.json) keep every field of each metric's own config class.
    metrics: Annotated[list[SerializeAsAny[MetricConfig]], Field(min_length=1)]
    cache: CacheConfig | None = None
    statistics: StatisticsConfig = StatisticsConfig()
    #: ``--decide``'s evaluation order and wave size (``beameval.config.decide``).
    decide: DecideConfig | None = None

    @field_validator("metrics", mode="before")
    @classmethod
    def _validate_each_metric(cls, raw: Any) -> Any:
        if not isinstance(raw, list):
            return raw
        parsed = []
        for position, entry in enumerate(raw):
            if not isinstance(entry, dict) or "type" not in entry:
                raise ValueError(f"metrics[{position}] must be a mapping with a 'type' key")
            model = config_model(entry["type"])
            try:
                parsed.append(model.model_validate(entry))
            except ValidationError as exc:
                raise ConfigError(format_errors(exc, prefix=f"metrics.{position}", model=model)) from None
        keys = metric_keys(parsed)
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise ValueError(f"metric names must be unique; repeated: {repeated} (set a distinct name: on each)")
        return parsed

    @field_validator("targets")
    @classmethod
    def _unique_names(cls, targets: list[NamedTarget] | None) -> list[NamedTarget] | None:
        if targets is not None:
            check_target_names(targets)
        return targets

    @model_validator(mode="after")
    def _online_needs_prompt(self) -> EvalConfig:
        if self.target is not None and self.targets is not None:
            raise ValueError(
                "set target (one model or agent) or targets (a list of named ones), not both; "
                "move the target into targets as {name: NAME, model: {...}}"
            )
        models = [self.target] if self.target is not None else list(self.targets or [])
        if any(target.retrieval is not None for target in models) and not self._corpus_known(models):
            raise ValueError(
                "a retrieval target needs its corpus: set target.retrieval.corpus {path, format}, or read a BEIR "
                "folder as the dataset (dataset.format: beir), whose corpus.jsonl is then searched"
            )
        if any(target.model is not None for target in models) and self.prompt_template is None:
            raise ValueError(
                "prompt_template is required with a model target, e.g. "
                "{messages: [{role: user, content: '{{ item.question }}'}]}"
            )
        return self

    @model_validator(mode="after")
    def _pairwise_needs_targets(self) -> EvalConfig:
        pairwise = [key for key, m in zip(metric_keys(self.metrics), self.metrics, strict=True) if _pairwise(m)]
        if pairwise and len(self.targets or []) < 2:
            raise ValueError(
                f"metric {pairwise[0]!r} has pairwise: true, which compares each target's answer with the first "
                "target's (the baseline); it needs targets: with at least two entries, the baseline first "
                "(move target into targets as {name: NAME, model: {...}} and add the model to compare), "
                "or remove pairwise"
            )
        return self

    def _corpus_known(self, models: list[Any]) -> bool:
        """Every retrieval target names its corpus, or the dataset is a BEIR folder that has one."""
        return self.dataset.format == "beir" or all(
            target.retrieval.corpus is not None for target in models if target.retrieval is not None
        )

    def public_dump(self) -> dict[str, Any]:
        """The resolved config as JSON-ready data: every field of every section, and never a secret.

        Keys live in environment variables (only their names are here); ``default_headers``
        are left out wherever they appear (target, judges), as their values may be secrets.
        A single-target config has no ``targets`` key (its dump, and eval_hash, are as before), a
        multi-target one no ``target`` key.
        """
        unused = {"targets"} if self.targets is None else {"target"}
        return _without_headers(self.model_dump(mode="json", exclude=unused))

    def for_target(self, target: NamedTarget) -> EvalConfig:
        """The single-target config a multi-target run evaluates ``target`` with.

        It is the config a user would write for that target alone: ``target:`` in place of
        ``targets:``, and ``params:`` with the target's own request settings laid over them.
        """
        params = self.params.model_copy(update=target.params.overrides())
        return self.model_copy(update={"target": target.as_target(), "targets": None, "params": params})


def _pairwise(metric: MetricConfig) -> bool:
    """A pairwise judge: it needs a first target to compare with (``llm-judge`` ``pairwise: true``)."""
    return bool(getattr(metric, "pairwise", False))


def _without_headers(data: Any) -> Any:
    """Drop every ``default_headers`` (their values may be credentials; names can reveal a gateway's scheme)."""
    if isinstance(data, dict):
        return {key: _without_headers(value) for key, value in data.items() if key != "default_headers"}
    if isinstance(data, list):
        return [_without_headers(value) for value in data]
    return data


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
        raise ConfigError(f"{source} is invalid: {format_errors(exc, model=EvalConfig)}") from None
    except EvaluatorError as exc:
        raise ConfigError(f"{source} is invalid: {exc.message}", hint=exc.hint) from None
