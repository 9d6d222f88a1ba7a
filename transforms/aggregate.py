"""SummarizeRun: fold every scored row into the run summary, its groups, repeat and cluster statistics.

Each statistic is a thin CombineFn over a pure accumulator of ``beameval.stats``:

* ``Combine``: the whole run's RunSummary (counts, per-score statistics, usage);
* ``GroupSummaries``: the same RunSummary per ``group_by`` value (a keyed combine);
* ``RowSamples`` then ``RepeatScopes`` (``params.repeats`` > 1): a keyed combine by
  ``row_index`` gives each row's per-score means, then a keyed combine by scope folds them;
* ``ClusterSums`` then ``ClusterScopes`` (``cluster_by``): a keyed combine by cluster
  value gives (n_c, Σx) per score for each scope the cluster meets, then a keyed combine
  by scope folds the cluster sums. Neither stage holds the rows: only one accumulator per
  cluster, however the groups cut across the clusters.

``Finish`` joins them into one JSON-ready summary (side inputs of a few entries per
scope), so the pipeline still writes a single ``_summary.json``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar

import apache_beam as beam

from beameval.config.statistics import StatisticsConfig, field_path
from beameval.core.records import ScoredRow
from beameval.core.summary import RunSummary
from beameval.stats.breakdown import row_keys
from beameval.stats.clusters import ClusterAccumulator, ClusterSums, ClusterTotals, ScopedClusterSums
from beameval.stats.repeats import RepeatAccumulator, RowSamples, RowUnit
from beameval.stats.uncertainty import finish_summary
from transforms.row_batches import rows_of

__all__ = ["SummarizeRun"]

_UNITS = "units"
_CLUSTERS = "clusters"
Keys = tuple[tuple[str, ...], "str | None"]  # (scopes, cluster key) of a row


class _Mergeable(Protocol):
    def merge_from(self, other: Any) -> Any: ...


M = TypeVar("M", bound=_Mergeable)


def _merged(accumulators: Iterable[M]) -> M:
    """Fold ``accumulators`` into the first (Beam hands over accumulators it no longer needs)."""
    iterator = iter(accumulators)
    first = next(iterator)
    for other in iterator:
        first.merge_from(other)
    return first


def _merged_columns(accumulators: Iterable[list[M]]) -> list[M]:
    """``_merged`` for one accumulator per score column."""
    iterator = iter(accumulators)
    first = next(iterator)
    for other in iterator:
        for mine, theirs in zip(first, other, strict=True):
            mine.merge_from(theirs)
    return first


class _RunSummaryFn(beam.CombineFn):
    """Delegates to RunSummary's pure add/merge; accumulators stay small."""

    def __init__(self, confidence_level: float = 0.95) -> None:
        self._level = confidence_level

    def create_accumulator(self) -> RunSummary:
        return RunSummary()

    def add_input(self, accumulator: RunSummary, element: ScoredRow | list[ScoredRow]) -> RunSummary:
        for row in rows_of(element):
            accumulator.add(row)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[RunSummary]) -> RunSummary:
        return RunSummary.merge(accumulators)

    def extract_output(self, accumulator: RunSummary) -> dict[str, Any]:
        summary = accumulator.to_dict()
        if self._level != 0.95:  # to_dict reports the default level; recompute at the configured one
            summary["scores"] = {name: acc.result(name, self._level) for name, acc in accumulator.scores.items()}
        return summary


class _ClusterSumsFn(beam.CombineFn):
    """Stage one of the clustered error: (n_c, Σx) per score of one cluster, for each of its scopes."""

    def __init__(self, width: int) -> None:
        self._width = width

    def create_accumulator(self) -> ScopedClusterSums:
        return ScopedClusterSums(self._width)

    def add_input(
        self, accumulator: ScopedClusterSums, row: tuple[tuple[str, ...], tuple[float, ...]]
    ) -> ScopedClusterSums:
        scopes, values = row
        return accumulator.add(scopes, values)

    def merge_accumulators(self, accumulators: Iterable[ScopedClusterSums]) -> ScopedClusterSums:
        return _merged(accumulators)

    def extract_output(self, accumulator: ScopedClusterSums) -> dict[str, ClusterSums]:
        return accumulator.by_scope


class _ClusterScopeFn(beam.CombineFn):
    """Stage two: every cluster's sums of one scope, folded per score for the CR1 formula."""

    def __init__(self, width: int) -> None:
        self._width = width

    def create_accumulator(self) -> list[ClusterAccumulator]:
        return [ClusterAccumulator() for _ in range(self._width)]

    def add_input(self, accumulator: list[ClusterAccumulator], sums: ClusterSums) -> list[ClusterAccumulator]:
        for index, (acc, count, infinite) in enumerate(zip(accumulator, sums.counts, sums.infinite, strict=True)):
            acc.add(count, sums.total(index), infinite)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list[ClusterAccumulator]]) -> list[ClusterAccumulator]:
        return _merged_columns(accumulators)

    def extract_output(self, accumulator: list[ClusterAccumulator]) -> list[ClusterTotals | None]:
        return [acc.totals() for acc in accumulator]


class _RowSamplesFn(beam.CombineFn):
    """Repeats, stage one: the K samples of one row -> its RowUnit (per-score means, correct counts)."""

    def create_accumulator(self) -> RowSamples:
        return RowSamples()

    def add_input(self, accumulator: RowSamples, sample: tuple[Keys, tuple[float, ...]]) -> RowSamples:
        return accumulator.add(*sample)

    def merge_accumulators(self, accumulators: Iterable[RowSamples]) -> RowSamples:
        return _merged(accumulators)

    def extract_output(self, accumulator: RowSamples) -> RowUnit:
        return accumulator.unit()


class _RepeatScopeFn(beam.CombineFn):
    """Repeats, stage two: the RowUnits of one scope, folded per score."""

    def __init__(self, width: int, repeats: int) -> None:
        self._width = width
        self._repeats = repeats

    def create_accumulator(self) -> list[RepeatAccumulator]:
        return [RepeatAccumulator(self._repeats) for _ in range(self._width)]

    def add_input(self, accumulator: list[RepeatAccumulator], unit: RowUnit) -> list[RepeatAccumulator]:
        for acc, score in zip(accumulator, unit.scores, strict=True):
            acc.add(score)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list[RepeatAccumulator]]) -> list[RepeatAccumulator]:
        return _merged_columns(accumulators)

    def extract_output(self, accumulator: list[RepeatAccumulator]) -> list[RepeatAccumulator]:
        return accumulator


class _StatisticsKeys(beam.DoFn):
    """Name each row's scopes and cluster once, and feed the group, repeat and cluster stages."""

    def __init__(self, names: list[str], statistics: StatisticsConfig, repeats: int) -> None:
        self._names = names
        self._groups = [field_path(path) for path in statistics.group_by]
        self._cluster = None if statistics.cluster_by is None else field_path(statistics.cluster_by)
        self._repeats = repeats

    def process(self, element: ScoredRow | list[ScoredRow]) -> Iterator[Any]:
        for row in rows_of(element):
            yield from self._keyed(row)

    def _keyed(self, row: ScoredRow) -> Iterator[Any]:
        scopes, cluster = row_keys(row.item_json, self._groups, self._cluster, row.item)
        for scope in scopes[1:]:
            yield (scope, row)
        if self._repeats == 1 and cluster is None:
            return
        values = tuple(row.scores.get(name, math.nan) for name in self._names)
        if self._repeats > 1:
            yield beam.pvalue.TaggedOutput(_UNITS, (row.row_index, ((scopes, cluster), values)))
        else:
            yield beam.pvalue.TaggedOutput(_CLUSTERS, (cluster, (scopes, values)))


def _unit_clusters(unit: RowUnit) -> tuple[str, tuple[tuple[str, ...], tuple[float, ...]]]:
    """A row's per-row means and scopes, keyed by its cluster for the cluster stage."""
    scopes, cluster = unit.keys
    return cluster, (scopes, tuple(score.mean for score in unit.scores))


def _scope_sums(cluster_sums: tuple[str, dict[str, ClusterSums]]) -> Iterator[tuple[str, ClusterSums]]:
    """One cluster's sums, keyed by each scope it met, for the per-scope fold."""
    yield from cluster_sums[1].items()


def _unit_scopes(unit: RowUnit) -> Iterator[tuple[str, RowUnit]]:
    scopes, _ = unit.keys
    for scope in scopes:
        yield scope, unit


def _finish(overall: dict[str, Any], groups: list[Any], repeats: Any, clusters: Any, **settings: Any) -> dict[str, Any]:
    return finish_summary(
        overall,
        groups,
        repeats=None if repeats is None else dict(repeats),
        clusters=None if clusters is None else dict(clusters),
        **settings,
    )


class SummarizeRun(beam.PTransform):
    """ScoredRow (or batches of them) -> a single JSON-ready summary dict (an empty run gives zero counts).

    Args:
        names: the per-row score names, in order.
        statistics: the ``statistics:`` section.
        repeats: ``params.repeats``.

    """

    def __init__(
        self, names: list[str] | None = None, statistics: StatisticsConfig | None = None, repeats: int = 1
    ) -> None:
        super().__init__()
        self._names = list(names or [])
        self._statistics = statistics or StatisticsConfig()
        self._repeats = repeats

    def expand(self, rows: beam.PCollection[ScoredRow]) -> beam.PCollection[dict[str, Any]]:
        stats, width, repeats = self._statistics, len(self._names), self._repeats
        level = stats.confidence_level
        overall = rows | "Combine" >> beam.CombineGlobally(_RunSummaryFn(level))
        if not stats.group_by and stats.cluster_by is None and repeats == 1:
            return overall | "Finish" >> beam.Map(finish_summary, [], [], self._names, level)
        keyed = rows | "StatisticsKeys" >> beam.ParDo(_StatisticsKeys(self._names, stats, repeats)).with_outputs(
            _UNITS, _CLUSTERS, main="groups"
        )
        groups = keyed.groups | "GroupSummaries" >> beam.CombinePerKey(_RunSummaryFn(level))
        repeat_scopes = cluster_scopes = None
        cluster_input = keyed[_CLUSTERS]
        if repeats > 1:
            units = keyed[_UNITS] | "RowSamples" >> beam.CombinePerKey(_RowSamplesFn()) | "Units" >> beam.Values()
            repeat_scopes = (
                units
                | "UnitScopes" >> beam.FlatMap(_unit_scopes)
                | "RepeatScopes" >> beam.CombinePerKey(_RepeatScopeFn(width, repeats))
            )
            cluster_input = units | "UnitClusters" >> beam.Map(_unit_clusters)
        if stats.cluster_by is not None:
            cluster_scopes = (
                cluster_input
                | "ClusterSums" >> beam.CombinePerKey(_ClusterSumsFn(width))
                | "ByScope" >> beam.FlatMap(_scope_sums)
                | "ClusterScopes" >> beam.CombinePerKey(_ClusterScopeFn(width))
            )
        return overall | "Finish" >> beam.Map(
            _finish,
            beam.pvalue.AsList(groups),
            None if repeat_scopes is None else beam.pvalue.AsList(repeat_scopes),
            None if cluster_scopes is None else beam.pvalue.AsList(cluster_scopes),
            group_by=list(stats.group_by),
            names=self._names,
            level=level,
        )
