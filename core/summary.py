"""The run summary: a small mergeable value folding every scored row into counts and statistics.

Its size depends on the number of score names, never on the number of rows: per-score
statistics use the bounded accumulators of ``stats``, corpus metrics keep element-wise
sums of their sufficient statistics, and only the lowest-indexed failure is kept.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from core.records import CallUsage, ScoredRow
from stats.summary import ScoreAccumulator
from stats.summary import merge as merge_accumulators
from stats.summary import result as score_result

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
    scores: dict[str, ScoreAccumulator] = field(default_factory=dict)
    labels: dict[str, Counter[str]] = field(default_factory=dict)
    corpus: dict[str, list[float]] = field(default_factory=dict)
    first_failure: FirstFailure | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 0
    requests: int = 0
    latency_ms: ScoreAccumulator = field(default_factory=ScoreAccumulator)
    metric_calls: CallUsage = field(default_factory=CallUsage)

    def add(self, row: ScoredRow) -> None:
        """Fold one scored row in."""
        self.rows += 1
        for name, value in row.scores.items():
            accumulator = self.scores.get(name)
            if accumulator is None:
                accumulator = self.scores[name] = ScoreAccumulator()
            accumulator.add(value)
        for name, label in row.labels.items():
            self.labels.setdefault(name, Counter())[label] += 1
        if row.corpus_stats:
            for key, stats in row.corpus_stats.items():
                total = self.corpus.get(key)
                self.corpus[key] = list(stats) if total is None else [a + b for a, b in zip(total, stats, strict=True)]
        if row.failure is not None:
            self.errors += 1
            self.not_sent += row.failure.not_sent
            if not row.failure.not_sent and (
                self.first_failure is None or row.row_index < self.first_failure.row_index
            ):
                self.first_failure = FirstFailure(
                    row.row_index, row.failure.phase, row.failure.metric, row.failure.text
                )
        info = row.inference
        if info.attempts is not None:
            self.requests += 1
            self.attempts += info.attempts
            self.prompt_tokens += info.prompt_tokens or 0
            self.completion_tokens += info.completion_tokens or 0
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
            merged.prompt_tokens += part.prompt_tokens
            merged.completion_tokens += part.completion_tokens
            merged.attempts += part.attempts
            merged.requests += part.requests
            merged.metric_calls.add(part.metric_calls)
            for name, counts in part.labels.items():
                merged.labels.setdefault(name, Counter()).update(counts)
            for key, stats in part.corpus.items():
                total = merged.corpus.get(key)
                merged.corpus[key] = (
                    list(stats) if total is None else [a + b for a, b in zip(total, stats, strict=True)]
                )
            failure = part.first_failure
            if failure is not None and (
                merged.first_failure is None or failure.row_index < merged.first_failure.row_index
            ):
                merged.first_failure = failure
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
            "counts": {"rows": self.rows, "ok": self.rows - self.errors, "errors": self.errors},
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
                "requests": self.requests,
                "attempts": self.attempts,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "latency_ms": {key: latency[key] for key in ("count", "mean", "min", "max", "percentiles")},
                "metric_calls": dataclasses.asdict(self.metric_calls),
            },
        }
