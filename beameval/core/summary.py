"""The run summary: a small mergeable value folding every scored row into counts and statistics.

Its size depends on the number of score names, never on the number of rows: per-score
statistics use the bounded accumulators of ``stats``, corpus metrics keep element-wise
sums of their sufficient statistics, and only the lowest-indexed failure is kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from beameval.core.records import CallUsage, ScoredRow
from beameval.stats.summary import ScoreAccumulator
from beameval.stats.summary import merge as merge_accumulators
from beameval.stats.summary import result as score_result

__all__ = ["FirstFailure", "RunSummary"]


@dataclass(slots=True)
class FirstFailure:
    """The failed row with the lowest row_index: what strict mode reports."""

    row_index: int
    phase: str
    metric: str | None
    message: str


@dataclass(slots=True)
class RunSummary:
    """Counts, per-score accumulators, rubric label counts, corpus sums and usage totals."""

    rows: int = 0
    errors: int = 0
    not_sent: int = 0
    skipped: int = 0
    scores: dict[str, ScoreAccumulator] = field(default_factory=dict)
    labels: dict[str, Counter[str]] = field(default_factory=dict)
    corpus: dict[str, list[float]] = field(default_factory=dict)
    first_failure: FirstFailure | None = None
    target_calls: CallUsage = field(default_factory=CallUsage)
    latency_ms: ScoreAccumulator = field(default_factory=ScoreAccumulator)
    metric_calls: CallUsage = field(default_factory=CallUsage)

    def add(self, row: ScoredRow) -> None:
        """Fold one scored row in (a skipped row only counts: the aggregates cover the rows evaluated)."""
        self.rows += 1
        if row.failure is not None and row.failure.skipped:
            self.skipped += 1
            return
        for name, value in row.scores.items():
            accumulator = self.scores.get(name)
            if accumulator is None:
                accumulator = self.scores[name] = ScoreAccumulator()
            accumulator.add(value)
        for name, label in row.labels.items():
            self.labels.setdefault(name, Counter())[label] += 1
        if row.corpus_stats:
            for key, stats in row.corpus_stats.items():
                self._add_corpus(key, stats)
        if row.failure is not None:
            self.errors += 1
            self.not_sent += row.failure.not_sent
            if not row.failure.not_sent:
                failure = row.failure
                self._keep_first(FirstFailure(row.row_index, failure.phase, failure.metric, failure.text))
        info = row.inference
        if info.cached:  # answered from the response store or the journal: a hit, not a request
            self.target_calls.cache_hits += 1
        elif info.attempts is not None:
            self.target_calls.record(info.attempts, info.prompt_tokens, info.completion_tokens)
            if info.latency_s is not None:
                self.latency_ms.add(info.latency_s * 1000.0)
        if row.metric_calls is not None:
            self.metric_calls.add(row.metric_calls)

    @staticmethod
    def merge(summaries: Iterable[RunSummary]) -> RunSummary:
        """Combine partial summaries; the result does not depend on their order."""
        parts = list(summaries)
        merged = RunSummary()
        for part in parts:
            merged.rows += part.rows
            merged.errors += part.errors
            merged.not_sent += part.not_sent
            merged.skipped += part.skipped
            merged.target_calls.add(part.target_calls)
            merged.metric_calls.add(part.metric_calls)
            for name, counts in part.labels.items():
                merged.labels.setdefault(name, Counter()).update(counts)
            for key, stats in part.corpus.items():
                merged._add_corpus(key, stats)
            if part.first_failure is not None:
                merged._keep_first(part.first_failure)
        names = sorted({name for part in parts for name in part.scores})
        merged.scores = {
            name: merge_accumulators([p.scores[name] for p in parts if name in p.scores]) for name in names
        }
        merged.latency_ms = merge_accumulators([p.latency_ms for p in parts])
        return merged

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data for the driver: counts, score statistics, raw corpus sums, usage."""
        latency = score_result(self.latency_ms, "latency_ms")
        return {
            "counts": {
                "rows": self.rows,
                "ok": self.rows - self.errors - self.skipped,
                "errors": self.errors,
                **({"skipped": self.skipped} if self.skipped else {}),
            },
            "not_sent": self.not_sent,
            "scores": {name: score_result(acc, name) for name, acc in self.scores.items()},
            "labels": {name: dict(counts) for name, counts in self.labels.items()},
            "corpus": self.corpus,
            "first_failure": None
            if self.first_failure is None
            else {
                "row_index": self.first_failure.row_index,
                "phase": self.first_failure.phase,
                "metric": self.first_failure.metric,
                "message": self.first_failure.message,
            },
            "usage": {
                **self.target_calls.as_dict(),  # requests, attempts, tokens, cache hits and misses
                "latency_ms": {key: latency[key] for key in ("count", "mean", "min", "max", "percentiles")},
                "metric_calls": self.metric_calls.as_dict(),
            },
        }

    def _add_corpus(self, key: str, stats: list[float]) -> None:
        """Sum one corpus metric's sufficient statistics element-wise."""
        total = self.corpus.get(key)
        self.corpus[key] = list(stats) if total is None else [a + b for a, b in zip(total, stats, strict=True)]

    def _keep_first(self, failure: FirstFailure) -> None:
        """Keep the failure with the lowest row_index (what strict mode reports)."""
        if self.first_failure is None or failure.row_index < self.first_failure.row_index:
            self.first_failure = failure
