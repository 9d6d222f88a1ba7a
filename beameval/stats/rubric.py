"""Rubric aggregates of LLM-judge scores: the label distribution and the modal label.

The numeric rubric values are aggregated like any score (a rubric has few distinct
values, so they stay exact); the chosen labels are counted per row by the run summary.
This module turns both into the reference's ``AggregateRubricScore`` shape
(docs/METRICS.md, "Range scores and rubric scores").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["RubricLevel", "mode_category", "rubric_result"]

RubricLevel = tuple[str, float, "str | None"]
"""One declared rubric level: ``(label, value, description or None)``."""

_RANGE_ONLY = ("percentiles", "histogram", "method")


def rubric_result(
    range_result: Mapping[str, Any], label_counts: Mapping[str, int], levels: Sequence[RubricLevel]
) -> dict[str, Any]:
    """Build the rubric aggregate from a score's range aggregate and its label counts.

    Args:
        range_result: the score's statistics (``beameval.stats.summary.result``).
        label_counts: label -> number of rows whose chosen label it was.
        levels: the declared levels, in declaration order.

    Returns:
        The range statistics without percentiles and histogram, with ``score_type``
        ``"rubric"``, ``rubric_distribution`` (one ``{label, description, value, count}``
        per level, in declaration order) and ``mode_category``.

    """
    result = {key: value for key, value in range_result.items() if key not in _RANGE_ONLY}
    result["score_type"] = "rubric"
    counts = {label: label_counts.get(label, 0) for label, _, _ in levels}
    result["rubric_distribution"] = [
        {"label": label, "description": description, "value": float(value), "count": counts[label]}
        for label, value, description in levels
    ]
    result["mode_category"] = mode_category(counts)
    return result


def mode_category(counts: Mapping[str, int]) -> str | None:
    """Return the label with the highest count, ties going to the smallest label.

    Args:
        counts: label -> count (zero counts included).

    Returns:
        The mode, set even when every count is 0; None only when there are no labels.

    """
    if not counts:
        return None
    return min(counts, key=lambda label: (-counts[label], label))
