"""ScoreRows: score each row with every metric; failed rows also go to the ``errors`` output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beameval.core.records import GeneratedRow, ScoredRow
from beameval.core.scoring import RowScorer
from beameval.metrics.base import MetricConfig
from transforms import NAMESPACE

__all__ = ["ERRORS", "ScoreRows", "error_record"]

ERRORS = "errors"


def error_record(row: ScoredRow) -> dict[str, Any]:
    """The ``errors/`` record of a failed row (CONTRACT.md)."""
    assert row.failure is not None
    return {
        "row_index": row.row_index,
        "phase": row.failure.phase,
        "metric": row.failure.metric,
        "error": row.failure.text,
        "http_status": row.inference.http_status,
        "attempts": row.inference.attempts,
        "item": row.item_json,
    }


class ScoreRows(beam.DoFn):
    """Emit a ScoredRow per row on the main output and an error record per failed row."""

    def __init__(self, metric_configs: list[MetricConfig]) -> None:
        self._configs = metric_configs

    def setup(self) -> None:
        self._scorer = RowScorer(self._configs)
        self._scored = Metrics.counter(NAMESPACE, "rows_scored")
        self._failed = Metrics.counter(NAMESPACE, "rows_failed")

    def process(self, row: GeneratedRow) -> Iterator[Any]:
        scored = self._scorer.score(row)
        self._scored.inc()
        yield scored
        if scored.failure is not None:
            self._failed.inc()
            yield beam.pvalue.TaggedOutput(ERRORS, json.dumps(error_record(scored), ensure_ascii=False))
