"""SummarizeRun: fold every scored row into one RunSummary with a thin CombineFn."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from beameval.core.records import ScoredRow
from beameval.core.summary import RunSummary

__all__ = ["SummarizeRun"]


class _RunSummaryFn(beam.CombineFn):
    """Delegates to RunSummary's pure add/merge; accumulators stay small."""

    def create_accumulator(self) -> RunSummary:
        return RunSummary()

    def add_input(self, accumulator: RunSummary, row: ScoredRow) -> RunSummary:
        accumulator.add(row)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[RunSummary]) -> RunSummary:
        return RunSummary.merge(accumulators)

    def extract_output(self, accumulator: RunSummary) -> dict[str, Any]:
        return accumulator.to_dict()


class SummarizeRun(beam.PTransform):
    """ScoredRow -> a single JSON-ready summary dict (an empty run gives zero counts)."""

    def expand(self, rows: beam.PCollection[ScoredRow]) -> beam.PCollection[dict[str, Any]]:
        return rows | "Combine" >> beam.CombineGlobally(_RunSummaryFn())
