"""Aggregation of LLM-judge rubric scores: label counts and a mode beside the numeric statistics.

The numeric rubric values go through a :class:`~stats.summary.ScoreAccumulator` (a rubric
has few distinct values, so it stays exact and order-independent); the chosen labels are
counted in a map label -> count whose size is bounded by the number of distinct labels
(a judge's parser only emits declared labels or ``""``; pass ``labels`` to enforce that).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from stats.summary import ScoreAccumulator

__all__ = ["RubricAccumulator", "RubricLevel", "add", "merge", "mode_category", "result"]

RubricLevel = tuple[str, float, "str | None"]
"""One declared rubric level: ``(label, value, description or None)``."""


class RubricAccumulator:
    """Mergeable label counts plus numeric statistics of one rubric score.

    Args:
        labels: if given, only these labels are counted (others are ignored), which
            bounds memory whatever the judge answers.

    Attributes:
        label_counts: label -> number of rows whose chosen label it was.
        scores: the numeric values' accumulator.

    """

    __slots__ = ("allowed", "label_counts", "scores")

    def __init__(self, labels: Iterable[str] | None = None) -> None:
        self.allowed: frozenset[str] | None = frozenset(labels) if labels is not None else None
        self.label_counts: dict[str, int] = {}
        self.scores = ScoreAccumulator()

    def __repr__(self) -> str:
        return f"RubricAccumulator(label_counts={self.label_counts!r}, scores={self.scores!r})"

    def add(self, value: Any, label: str | None) -> RubricAccumulator:
        """Add one row's rubric value and chosen label.

        Args:
            value: the numeric value (NaN or None when the answer was unmatched).
            label: the chosen label; None or ``""`` counts towards no level.

        Returns:
            This accumulator.

        """
        self.scores.add(value)
        if label and (self.allowed is None or label in self.allowed):
            self.label_counts[label] = self.label_counts.get(label, 0) + 1
        return self

    def merge_from(self, other: RubricAccumulator) -> RubricAccumulator:
        """Fold another accumulator into this one; ``other`` is left unchanged.

        Args:
            other: the accumulator to absorb.

        Returns:
            This accumulator.

        """
        self.scores.merge_from(other.scores)
        counts = self.label_counts
        for label, count in other.label_counts.items():
            counts[label] = counts.get(label, 0) + count
        return self

    def result(self, name: str, rubric: Sequence[RubricLevel]) -> dict[str, Any]:
        """Build the contract's ``AggregateRubricScore`` dict.

        Args:
            name: the score name, ``<metric key>.<score name>``.
            rubric: the declared levels, ``(label, value, description or None)``, in
                declaration order.

        Returns:
            name, score_type ``"rubric"``, count, nan_count, sum, mean, min, max,
            std_dev, variance, rubric_distribution (one ``{label, description, value,
            count}`` per level, in declaration order) and mode_category. No
            percentiles or histogram.

        """
        out = self.scores.base_statistics(name, "rubric")
        counts = {label: self.label_counts.get(label, 0) for label, _, _ in rubric}
        out["rubric_distribution"] = [
            {"label": label, "description": description, "value": float(value), "count": counts[label]}
            for label, value, description in rubric
        ]
        out["mode_category"] = mode_category(counts)
        return out


def mode_category(counts: dict[str, int]) -> str | None:
    """Return the label with the highest count, ties going to the smallest label.

    Args:
        counts: label -> count (zero counts included).

    Returns:
        The mode, set even when every count is 0; None only when there are no labels.

    """
    if not counts:
        return None
    return min(counts, key=lambda label: (-counts[label], label))


def add(acc: RubricAccumulator, value: Any, label: str | None) -> RubricAccumulator:
    """Add one row's value and label to ``acc`` (in place) and return it."""
    return acc.add(value, label)


def merge(accs: Iterable[RubricAccumulator]) -> RubricAccumulator:
    """Merge accumulators into the first one (mutated, as Beam allows) and return it.

    Args:
        accs: the accumulators; the others are left unchanged.

    Returns:
        The first accumulator holding everything, or a new empty one if there are none.

    """
    iterator = iter(accs)
    first = next(iterator, None)
    if first is None:
        return RubricAccumulator()
    for acc in iterator:
        first.merge_from(acc)
    return first


def result(acc: RubricAccumulator, name: str, rubric: Sequence[RubricLevel]) -> dict[str, Any]:
    """Return the ``AggregateRubricScore`` dict of ``acc`` (see :meth:`RubricAccumulator.result`)."""
    return acc.result(name, rubric)
