"""retrieval-ndcg, -recall, -precision, -map and -mrr: trec_eval's measures of one query's ranked list.

Each row is one query: ``retrieved`` renders its ranked result list (after a retrieval
target, ``{{ sample.output }}``) and ``relevant`` its graded judgements (``{doc_id:
grade}``). The measures are computed per row in ``beameval.metrics.retrieval_measures``,
so aggregates, intervals, groups and comparisons treat them like every other score; the
values equal ``pytrec_eval``'s on the same run and qrels (docs/METRICS.md, "Retrieval
metrics").

A query without a relevant document has no defined recall, MAP or nDCG: every score of
the row is NaN and the label output ``nan_reason`` says ``no relevant documents`` (the
row succeeds; trec_eval reports 0 or leaves the query out, the reference SDK reports 0,
which pulls a mean down for queries nothing could have answered).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from beameval.core.templates import Template
from beameval.metrics.base import Metric, MetricConfig, MetricContext, register
from beameval.metrics.retrieval_measures import (
    Judged,
    average_precision_cut,
    judge,
    ndcg_cut,
    parse_relevant,
    precision,
    ranked_ids,
    recall,
    reciprocal_rank,
)

__all__ = ["NAN_REASON", "NO_RELEVANT", "RetrievalConfig"]

NAN_REASON = "nan_reason"
NO_RELEVANT = "no relevant documents"
_DEFAULT_K = (1, 5, 10, 100)


class RetrievalConfig(MetricConfig):
    """Config of the ``retrieval-*`` metrics.

    Attributes:
        retrieved: template of the ranked result list (ids, ``{id, score}`` objects, or ``{id: score}``).
        relevant: template of the judgements ``{doc_id: grade}`` (grade >= 1 relevant) or a list of relevant ids.
        k: the cut-offs, each a score ``<measure>_<k>``.
    """

    retrieved: Any = "{{ sample.output }}"
    relevant: Any = "{{ item.relevant }}"
    k: Annotated[list[Annotated[int, Field(ge=1, le=1_000_000)]], Field(min_length=1)] = list(_DEFAULT_K)

    @field_validator("k")
    @classmethod
    def _distinct(cls, cutoffs: list[int]) -> list[int]:
        if len(set(cutoffs)) != len(cutoffs):
            raise ValueError(f"cut-offs must be distinct, got {cutoffs}")
        return cutoffs


class _RetrievalMetric(Metric[RetrievalConfig]):
    """One trec_eval measure at every cut-off of ``k``; subclasses name it."""

    value_range = (0.0, 1.0)
    label_outputs = (NAN_REASON,)
    #: the score name's prefix (``ndcg_cut`` gives ``ndcg_cut_10``).
    prefix: ClassVar[str]

    def __init__(self, config: RetrievalConfig) -> None:
        super().__init__(config)
        self._retrieved = Template(config.retrieved, "retrieved")
        self._relevant = Template(config.relevant, "relevant")

    def output_names(self) -> list[str]:
        return [f"{self.prefix}_{k}" for k in self.config.k]

    @abstractmethod
    def measure(self, judged: Judged, k: int) -> float:
        """The measure of one query (with at least one relevant document) at cut-off ``k``."""

    def values(self, judged: Judged) -> dict[str, float]:
        """This measure's scores for a query with at least one relevant document."""
        return {f"{self.prefix}_{k}": self.measure(judged, k) for k in self.config.k}

    def score(self, ctx: MetricContext) -> dict[str, float | str]:
        context = ctx.template_context
        ranked = ranked_ids(self._retrieved.render(context))
        judged = judge(ranked, parse_relevant(self._relevant.render(context)))
        if judged.num_rel == 0:
            return {**dict.fromkeys(self.output_names(), float("nan")), NAN_REASON: NO_RELEVANT}
        return {**self.values(judged), NAN_REASON: ""}


class RetrievalNDCGConfig(RetrievalConfig):
    """Config of ``type: retrieval-ndcg``: ``retrieved``, ``relevant`` and the cut-offs ``k``."""


@register("retrieval-ndcg")
class RetrievalNDCG(_RetrievalMetric):
    """trec_eval ``ndcg_cut_k`` (docs/METRICS.md, `retrieval-ndcg`)."""

    config_class = RetrievalNDCGConfig

    prefix = "ndcg_cut"

    def measure(self, judged: Judged, k: int) -> float:
        return ndcg_cut(judged, k)


class RetrievalRecallConfig(RetrievalConfig):
    """Config of ``type: retrieval-recall``: ``retrieved``, ``relevant`` and the cut-offs ``k``."""


@register("retrieval-recall")
class RetrievalRecall(_RetrievalMetric):
    """trec_eval ``recall_k`` (docs/METRICS.md, `retrieval-recall`)."""

    config_class = RetrievalRecallConfig

    prefix = "recall"

    def measure(self, judged: Judged, k: int) -> float:
        return recall(judged, k)


class RetrievalPrecisionConfig(RetrievalConfig):
    """Config of ``type: retrieval-precision``: ``retrieved``, ``relevant`` and the cut-offs ``k``."""


@register("retrieval-precision")
class RetrievalPrecision(_RetrievalMetric):
    """trec_eval ``P_k`` (docs/METRICS.md, `retrieval-precision`)."""

    config_class = RetrievalPrecisionConfig

    prefix = "P"

    def measure(self, judged: Judged, k: int) -> float:
        return precision(judged, k)


class RetrievalMAPConfig(RetrievalConfig):
    """Config of ``type: retrieval-map``: ``retrieved``, ``relevant`` and the cut-offs ``k``."""


@register("retrieval-map")
class RetrievalMAP(_RetrievalMetric):
    """trec_eval ``map_cut_k`` (docs/METRICS.md, `retrieval-map`)."""

    config_class = RetrievalMAPConfig

    prefix = "map_cut"

    def measure(self, judged: Judged, k: int) -> float:
        return average_precision_cut(judged, k)


class RetrievalMRRConfig(RetrievalConfig):
    """Config of ``type: retrieval-mrr``: ``retrieved``, ``relevant`` and the cut-offs ``k``."""


@register("retrieval-mrr")
class RetrievalMRR(_RetrievalMetric):
    """trec_eval ``recip_rank`` over the whole list, and ``mrr_cut_k`` within each cut-off (docs/METRICS.md)."""

    config_class = RetrievalMRRConfig

    prefix = "mrr_cut"

    def measure(self, judged: Judged, k: int) -> float:
        return reciprocal_rank(judged, k)

    def output_names(self) -> list[str]:
        return ["recip_rank", *super().output_names()]

    def values(self, judged: Judged) -> dict[str, float]:
        return {"recip_rank": reciprocal_rank(judged), **super().values(judged)}
