"""The metric interface and the registry of metric types by name.

A metric is one module: a frozen pydantic config class (its fields are the config keys
under ``metrics:``) and a ``Metric`` subclass registered with ``@register``. Row metrics
are plain synchronous functions of (item, sample); corpus metrics additionally reduce
each row to a fixed-length vector of sufficient statistics that the aggregation sums, so a
corpus score never needs every row in one place. Endpoint metrics (``EndpointMetric``: the
LLM judge, remote scorers) get their endpoint's reply from a pipeline stage that runs
before scoring, so ``score`` never does I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from beameval.config.access import EndpointAccess
from beameval.core.errors import MetricError
from beameval.core.records import EndpointReply
from beameval.core.templates import Template

if TYPE_CHECKING:  # inference imports pipeline.config, which imports this module
    from beameval.inference.prepared import PreparedRequest
    from beameval.inference.targets.base import TargetHandler

__all__ = [
    "CANDIDATE_DEFAULT",
    "EndpointMetric",
    "EndpointSettings",
    "Metric",
    "MetricConfig",
    "MetricContext",
    "register",
]

CANDIDATE_DEFAULT = "{{ sample.output_text }}"


class MetricConfig(BaseModel):
    """Fields every metric config shares; subclasses add their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    #: The metric's key in score names (``<name>.<output>``); default: the type, numbered when repeated.
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_\-]+$", max_length=64)] | None = None
    description: str | None = None
    labels: dict[str, str] | None = None


ConfigT = TypeVar("ConfigT", bound=MetricConfig)


class MetricContext:
    """What a metric sees for one row: the dataset item, the generated sample, endpoint replies.

    ``template_context`` is built lazily once per row and shared by every template of
    every metric on that row. ``responses`` holds the replies of the row's metric endpoint
    calls (``EndpointMetric``) keyed by call key; it is None when no endpoint stage ran.
    ``baseline`` is the first target's sample of the same row in a multi-target run with a
    pairwise judge (``{}`` when that target has no answer for it); None otherwise.
    """

    __slots__ = ("_template_context", "baseline", "item", "responses", "sample")

    def __init__(
        self,
        item: Mapping[str, Any],
        sample: Mapping[str, Any],
        responses: Mapping[str, EndpointReply] | None = None,
        baseline: Mapping[str, Any] | None = None,
    ) -> None:
        self.item = item
        self.sample = sample
        self.responses = responses
        self.baseline = baseline
        self._template_context: dict[str, Any] | None = None

    @property
    def template_context(self) -> dict[str, Any]:
        """``{**item, **sample, "item": item, "sample": sample}`` (sample keys win), and ``baseline`` when set."""
        if self._template_context is None:
            self._template_context = {
                **self.item,
                **self.sample,
                "item": self.item,
                "sample": self.sample,
                **({"baseline": self.baseline} if self.baseline is not None else {}),
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
    #: the closed range every numeric output lies in, when the metric type fixes it (None: unknown).
    value_range: ClassVar[tuple[float, float] | None] = None

    def __init__(self, config: ConfigT) -> None:
        self.config = config
        #: the metric's key in the run (``llm-judge``, ``llm-judge_2``); set by ``resolve``.
        self.key: str = config.type

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

    def detail_names(self) -> list[str]:
        """Names of text details kept in ``rows/`` for debugging (``<key>.<name>`` columns)."""
        return []

    def row_details(self, ctx: MetricContext) -> dict[str, str | None]:
        """This row's details (what the judge replied, which calls were predicted); never raises."""
        return {}

    # Corpus metrics override the three methods below.
    def corpus_output_names(self) -> list[str]:
        """Names of corpus-level outputs (computed over the whole run)."""
        return []

    def collects_corpus_stats(self) -> bool:
        """Whether rows carry ``corpus_stats`` (a calibrated judge sums its agreement counts this way)."""
        return bool(self.corpus_output_names())

    def corpus_stats(self, ctx: MetricContext) -> list[float] | None:
        """This row's contribution to the corpus score, summed element-wise over rows."""
        return None

    def corpus_score(self, totals: Sequence[float]) -> dict[str, float]:
        """The corpus scores from the element-wise sum of every row's ``corpus_stats``."""
        return {}

    def rubric_definitions(self) -> dict[str, list[tuple[str, float, str | None]]]:
        """Rubric outputs and their levels ``(label, value, description)``; aggregated by label."""
        return {}

    def output_ranges(self) -> dict[str, tuple[float, float]]:
        """The known ``(min, max)`` of each per-row and corpus output; outputs of unknown range are left out.

        Intervals are clipped to it and a comparison's default margin is 1% of it.
        """
        if self.value_range is None:
            return {}
        return {name: self.value_range for name in [*self.output_names(), *self.corpus_output_names()]}

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


class EndpointSettings(NamedTuple):
    """How an endpoint metric's calls are sent: its own engine settings."""

    parallelism: int
    max_retries: int
    request_timeout: float | None


class EndpointMetric(Metric[ConfigT]):
    """A metric that calls an endpoint once per row, in two phases, so scoring stays synchronous.

    1. ``transforms.metric_calls.CallMetricEndpoints`` (between generation and scoring)
       calls ``build_request`` for each row, sends it through the worker's shared
       ``InferenceEngine`` for ``endpoint_handler()`` with ``endpoint_settings``, and
       attaches the outcome to the row as an ``EndpointReply`` under the metric key.
    2. ``score`` reads that reply with ``reply(ctx)`` and parses it.

    ``reply`` raises (a row failure) when no endpoint stage ran or the request could not
    be built (a template error); a reply whose endpoint failed after retries comes back
    with ``error`` set, and each metric decides whether that fails the row.
    """

    @abstractmethod
    def endpoint_handler(self) -> TargetHandler:
        """The handler of the metric's endpoint, built once per worker (API key read from the environment)."""

    @property
    @abstractmethod
    def endpoint_access(self) -> EndpointAccess:
        """The endpoint's key variable, key header and CA bundle (what the preflight checks)."""

    @property
    @abstractmethod
    def endpoint_settings(self) -> EndpointSettings:
        """Parallelism, retries and per-attempt timeout of the metric's engine."""

    def endpoint_calls(self) -> Sequence[EndpointMetric[Any]]:
        """The calls this metric makes per row, each replied to under its own ``key``: usually just itself.

        A pairwise judge adds the call that shows its two answers in the other order
        (key ``<key>.swapped``); the endpoint stages send, store and batch each call as one.
        """
        return (self,)

    def needs_call(self, ctx: MetricContext) -> bool:
        """False when the row's score is known without asking (a pairwise judge's identical answers); never raises."""
        return True

    @abstractmethod
    def build_request(self, ctx: MetricContext) -> PreparedRequest:
        """The request to send for one row.

        Raises:
            TemplateError: a template of the metric failed on this row.
            MetricError: the row cannot give a request.
        """

    def reply(self, ctx: MetricContext) -> EndpointReply:
        """This metric's reply for the row.

        Raises:
            MetricError: no endpoint stage ran, or the request could not be built.
        """
        reply = None if ctx.responses is None else ctx.responses.get(self.key)
        if reply is None:
            raise MetricError(
                f"metric '{self.key}' calls an endpoint, but the row has no reply for it; "
                "the pipeline must run CallMetricEndpoints between generation and scoring."
            )
        if reply.error is not None and reply.error_kind == "request":
            raise MetricError(reply.error)
        return reply


REGISTRY: dict[str, type[Metric[Any]]] = {}


def register(type_name: str) -> Callable[[type[Metric[Any]]], type[Metric[Any]]]:
    """Class decorator adding a metric under its config ``type`` name."""

    def decorate(cls: type[Metric[Any]]) -> type[Metric[Any]]:
        if type_name in REGISTRY:
            raise ValueError(f"metric type {type_name!r} is registered twice")
        REGISTRY[type_name] = cls
        return cls

    return decorate
