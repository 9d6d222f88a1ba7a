"""Scoring one generated row with every metric: scores, labels, corpus stats and failures.

Beam-free: the scoring DoFn is a thin shell around ``RowScorer``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from beameval.core.errors import EvaluatorError
from beameval.core.records import CallUsage, GeneratedRow, InferenceInfo, RowFailure, ScoredRow, item_json
from beameval.metrics.base import Metric, MetricConfig, MetricContext
from beameval.metrics.registry import resolve

__all__ = ["KeyedMetric", "RowScorer", "metric_keys"]

NAN = math.nan


class KeyedMetric(Protocol):
    """What names a metric in score names: a metric config, or its dump as a run recorded it."""

    @property
    def type(self) -> str: ...

    @property
    def name(self) -> str | None: ...


def metric_keys(configs: Sequence[KeyedMetric]) -> list[str]:
    """Unique metric keys: a metric's ``name`` when set, else its type with ``_2``, ``_3``… for repeats.

    The numbered form is the reference's rule; a ``name`` says which of two ``f1`` metrics
    is which in every score name (``f1_strict.f1``). Names are checked unique at config time.
    """
    seen: dict[str, int] = {}
    keys = []
    for config in configs:
        if config.name is not None:
            keys.append(config.name)
            continue
        seen[config.type] = seen.get(config.type, 0) + 1
        keys.append(config.type if seen[config.type] == 1 else f"{config.type}_{seen[config.type]}")
    return keys


class RowScorer:
    """Scores rows with a fixed list of metrics, built once per worker.

    Args:
        configs: the validated metric configs, in config order.
        id_field: the dataset field that identifies a row (``dataset.id_field``), kept as ``id``.
    """

    def __init__(self, configs: Sequence[MetricConfig], id_field: str | None = None) -> None:
        self.metrics: list[tuple[str, Metric[Any]]] = [
            (key, resolve(config, key)) for key, config in zip(metric_keys(configs), configs, strict=True)
        ]
        self.score_names = [f"{key}.{name}" for key, metric in self.metrics for name in metric.output_names()]
        self.label_names = [f"{key}.{name}" for key, metric in self.metrics for name in metric.label_outputs]
        #: score name -> the (min, max) its metric can produce, for the scores whose range is known.
        self.score_ranges = {
            f"{key}.{name}": bounds for key, metric in self.metrics for name, bounds in metric.output_ranges().items()
        }
        self._id_field = id_field
        self.detail_names = (["id"] if id_field else []) + [
            f"{key}.{name}" for key, metric in self.metrics for name in metric.detail_names()
        ]
        self._corpus_metrics = [(key, m) for key, m in self.metrics if m.collects_corpus_stats()]
        self._detail_metrics = [(key, m, m.detail_names()) for key, m in self.metrics if m.detail_names()]

    def score(self, row: GeneratedRow) -> ScoredRow:
        """Score one row; a failing metric leaves NaN for its outputs and records why."""
        scores = dict.fromkeys(self.score_names, NAN)
        labels: dict[str, str] = {}
        failure = row.failure
        corpus = None
        ctx = None if row.item is None else MetricContext(row.item, row.sample, row.metric_responses, row.baseline)
        if failure is None and ctx is not None:
            failure = self._score_metrics(ctx, scores, labels)
            if failure is None and self._corpus_metrics:
                corpus = {key: metric.corpus_stats(ctx) or [] for key, metric in self._corpus_metrics}
        output_text = row.sample.get("output_text")
        return ScoredRow(
            row_index=row.row_index,
            item_json=item_json(row.item, row.raw),
            output_text=output_text if isinstance(output_text, str) else None,
            scores=scores,
            failure=failure,
            inference=row.inference or InferenceInfo(),
            labels=labels,
            corpus_stats=corpus,
            metric_calls=CallUsage.of_replies(row.metric_responses),
            sample_index=row.sample_index,
            details=self._details(row, ctx),
            item=row.item,
        )

    def _details(self, row: GeneratedRow, ctx: MetricContext | None) -> dict[str, str | None]:
        """``id`` and every metric's details, also for failed rows (that is when they help most)."""
        details: dict[str, str | None] = {}
        if self._id_field is not None:
            value = row.item.get(self._id_field) if row.item is not None else None
            details["id"] = None if value is None else str(value)
        if ctx is None:
            return details
        for key, metric, names in self._detail_metrics:
            try:
                found = metric.row_details(ctx)
            except Exception:  # noqa: BLE001 - details are for debugging; they never fail a row
                found = {}
            details.update({f"{key}.{name}": found.get(name) for name in names})
        return details

    def _score_metrics(self, ctx: MetricContext, scores: dict[str, float], labels: dict[str, str]) -> RowFailure | None:
        failure: RowFailure | None = None
        for key, metric in self.metrics:
            try:
                values = metric.score(ctx)
            except EvaluatorError as exc:
                message = f"metric '{key}': {exc}"
            except Exception as exc:  # noqa: BLE001 - a metric bug must fail its row, not the run
                message = f"metric '{key}' raised {type(exc).__name__}: {exc}"
            else:
                for name, value in values.items():
                    if isinstance(value, str):
                        labels[f"{key}.{name}"] = value
                    else:
                        scores[f"{key}.{name}"] = float(value)
                continue
            if failure is None:
                failure = RowFailure("scoring", [message], metric=key)
            else:
                failure.messages.append(message)
        return failure
