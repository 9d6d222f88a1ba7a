"""The metric interface and the registry of metric types by name.

A metric is one module: a frozen pydantic config class (its fields are the config keys
under ``metrics:``) and a ``Metric`` subclass registered with ``@register``. Row metrics
are plain synchronous functions of (item, sample); corpus metrics additionally reduce
each row to a fixed-length vector of sufficient statistics that the aggregation sums, so a
corpus score never needs every row in one place.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from core.errors import ConfigError, MetricError
from core.templates import Template

__all__ = [
    "CANDIDATE_DEFAULT",
    "Metric",
    "MetricConfig",
    "MetricContext",
    "config_model",
    "metric_types",
    "register",
    "resolve",
]

CANDIDATE_DEFAULT = "{{ sample.output_text }}"


class MetricConfig(BaseModel):
    """Fields every metric config shares; subclasses add their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    description: str | None = None
    labels: dict[str, str] | None = None


ConfigT = TypeVar("ConfigT", bound=MetricConfig)


class MetricContext:
    """What a metric sees for one row: the dataset item and the generated sample.

    ``template_context`` is built lazily once per row and shared by every template of
    every metric on that row.
    """

    __slots__ = ("_template_context", "item", "sample")

    def __init__(self, item: Mapping[str, Any], sample: Mapping[str, Any]) -> None:
        self.item = item
        self.sample = sample
        self._template_context: dict[str, Any] | None = None

    @property
    def template_context(self) -> dict[str, Any]:
        """``{**item, **sample, "item": item, "sample": sample}`` (sample keys win)."""
        if self._template_context is None:
            self._template_context = {
                **self.item,
                **self.sample,
                "item": self.item,
                "sample": self.sample,
            }
        return self._template_context


class Metric(ABC, Generic[ConfigT]):
    """A scorer built from its config once per worker; ``score`` runs once per row.

    Subclasses set ``config_class`` and implement ``output_names`` and ``score``.
    ``score`` returns one float per output name (NaN allowed) or raises
    ``MetricError``/``TemplateError`` for a row failure.
    """

    config_class: ClassVar[type[MetricConfig]]
    #: outputs that hold a label (text) rather than a number; not aggregated.
    label_outputs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: ConfigT) -> None:
        self.config = config

    @property
    def type_name(self) -> str:
        """The registry key of this metric (``exact-match``, …)."""
        return self.config.type

    @abstractmethod
    def output_names(self) -> list[str]:
        """Names of the per-row numeric outputs, in the order they are reported."""

    @abstractmethod
    def score(self, ctx: MetricContext) -> Mapping[str, float | str]:
        """Score one row: a float per numeric output, a string per label output.

        Raises:
            MetricError: the row cannot be scored.
            TemplateError: a template of the metric failed on this row.
        """

    # Corpus metrics override the three methods below.
    def corpus_output_names(self) -> list[str]:
        """Names of corpus-level outputs (computed over the whole run)."""
        return []

    def corpus_stats(self, ctx: MetricContext) -> list[float] | None:
        """This row's contribution to the corpus score, summed element-wise over rows."""
        return None

    def corpus_score(self, totals: Sequence[float]) -> dict[str, float]:
        """The corpus scores from the element-wise sum of every row's ``corpus_stats``."""
        return {}

    # Helpers shared by metrics.
    @staticmethod
    def candidate_template(candidate: str | None) -> Template:
        """The candidate template, defaulting to the model's output text."""
        return Template(candidate if candidate is not None else CANDIDATE_DEFAULT, "candidate")

    def missing_candidate(self, ctx: MetricContext) -> MetricError:
        """The error for a row whose sample has no output text to score."""
        if "output_text" in ctx.sample or not ctx.sample:
            cause = (
                "offline runs (no target) must set 'candidate' to a template over the row"
                if not ctx.sample
                else "the model returned an empty answer"
            )
        else:
            cause = "the sample has no output_text"
        return MetricError(f"metric '{self.type_name}' has no candidate to score: {cause}.")


_REGISTRY: dict[str, type[Metric[Any]]] = {}


def register(type_name: str) -> Callable[[type[Metric[Any]]], type[Metric[Any]]]:
    """Class decorator adding a metric under its config ``type`` name."""

    def decorate(cls: type[Metric[Any]]) -> type[Metric[Any]]:
        if type_name in _REGISTRY:
            raise ValueError(f"metric type {type_name!r} is registered twice")
        _REGISTRY[type_name] = cls
        return cls

    return decorate


def metric_types() -> list[str]:
    """Every registered metric type name, sorted."""
    _load_builtin_metrics()
    return sorted(_REGISTRY)


def config_model(type_name: str) -> type[MetricConfig]:
    """The config class for a metric type.

    Raises:
        ConfigError: the type is unknown; the message lists the valid ones.
    """
    _load_builtin_metrics()
    try:
        return _REGISTRY[type_name].config_class
    except KeyError:
        raise ConfigError(f"unknown metric type {type_name!r}; valid types are: {', '.join(metric_types())}.") from None


def resolve(config: MetricConfig) -> Metric[Any]:
    """Build the runtime metric for a validated config."""
    _load_builtin_metrics()
    return _REGISTRY[config.type](config)


def _load_builtin_metrics() -> None:
    """Import the built-in metric modules so their ``@register`` decorators run."""
    import metrics.builtin  # noqa: F401  (import for side effect: registration)
