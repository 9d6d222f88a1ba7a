"""Final per-score uncertainty: the naive interval, replaced by the repeat or clustered one where configured.

Every aggregate starts with the naive fields of ``beameval.stats.intervals.uncertainty``
(independent values: Wilson for 0/1 scores, Student-t otherwise). Then, in this order:

* with ``params.repeats`` K > 1, the row is the unit: stderr and the t interval come
  from the per-row means (``RepeatAccumulator.fields``), and ``within_row_variance``,
  ``pass_at_k`` and ``pass_hat_k`` are added;
* with ``statistics.cluster_by``, stderr and the interval are the CR1 clustered ones
  (``"clustered-t"``), over the rows (or per-row means) of each cluster.

``finish_summary`` applies this to the whole run and to every group, and orders the groups.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from beameval.stats.breakdown import OVERALL, group_order, parse_scope
from beameval.stats.clusters import ClusterTotals, clustered_fields
from beameval.stats.repeats import RepeatAccumulator
from beameval.stats.summary import ScoreAccumulator

__all__ = ["finish_score", "finish_summary"]

_INTERVAL = ("stderr", "ci_low", "ci_high", "ci_method")
#: The parts of a run summary a group keeps (the rest is run-wide: usage, failures).
_GROUP_PARTS = ("counts", "scores", "labels", "corpus")


def finish_score(
    score: dict[str, Any],
    level: float,
    repeats: RepeatAccumulator | None = None,
    clusters: ClusterTotals | None = None,
    clustered: bool = False,
) -> dict[str, Any]:
    """Replace the naive interval of one aggregate by the configured one (in place).

    Args:
        score: the aggregate, as ``ScoreAccumulator.result`` builds it.
        level: the confidence level.
        repeats: the score's repeat accumulator when ``params.repeats`` > 1, else None.
        clusters: the score's cluster totals (None when it has none, e.g. no values).
        clustered: whether ``statistics.cluster_by`` is set.

    Returns:
        ``score``, updated.

    """
    mean: float | None = score.get("mean")
    finite = mean is not None and math.isfinite(mean) and score.get("variance") is not None
    if repeats is not None:
        if mean is not None and finite:
            fields = repeats.fields(mean, level)
        else:
            fields = {**dict.fromkeys(_INTERVAL), "within_row_variance": None}
        if clustered:
            fields = {key: value for key, value in fields.items() if key not in _INTERVAL}
        score.update(fields)
    if clustered:
        score.update(
            clustered_fields(mean, clusters, level) if mean is not None and finite else dict.fromkeys(_INTERVAL)
        )
    return score


def _finish_scores(
    scores: dict[str, dict[str, Any]],
    names: Sequence[str],
    level: float,
    repeats: Sequence[RepeatAccumulator] | None,
    clusters: Sequence[ClusterTotals | None] | None,
    clustered: bool,
) -> None:
    for position, name in enumerate(names):
        if name not in scores:  # no row reached this scope's accumulators (an empty run): null statistics
            scores[name] = ScoreAccumulator().result(name, level)
        finish_score(
            scores[name],
            level,
            None if repeats is None else repeats[position],
            None if clusters is None else clusters[position],
            clustered,
        )


def finish_summary(
    overall: dict[str, Any],
    groups: Sequence[tuple[str, dict[str, Any]]],
    group_by: Sequence[str],
    names: Sequence[str],
    level: float,
    repeats: Mapping[str, Sequence[RepeatAccumulator]] | None = None,
    clusters: Mapping[str, Sequence[ClusterTotals | None]] | None = None,
) -> dict[str, Any]:
    """Finish the run summary: final intervals for the run and each group, and the ordered ``groups``.

    Args:
        overall: the whole run's summary (``RunSummary.to_dict`` with scores at ``level``).
        groups: ``(scope, summary)`` per group, in any order.
        group_by: the ``group_by`` fields, in config order.
        names: the per-row score names, in the order the accumulators use.
        level: the confidence level.
        repeats: scope -> one RepeatAccumulator per score, when ``params.repeats`` > 1.
        clusters: scope -> one ClusterTotals (or None) per score, when ``cluster_by`` is set.

    Returns:
        ``overall``, updated, with ``groups``: ``{"by", "value", "counts", "scores",
        "labels", "corpus"}`` per group, ordered by field then value (null last).

    """
    clustered = clusters is not None
    empty: list[Any] = []

    def finish(scope: str, summary: dict[str, Any]) -> None:
        scope_repeats = None if repeats is None else repeats.get(scope) or [RepeatAccumulator(1)] * len(names)
        scope_clusters = None if clusters is None else clusters.get(scope) or [None] * len(names)
        _finish_scores(summary["scores"], names, level, scope_repeats, scope_clusters, clustered)

    finish(OVERALL, overall)
    finished = []
    for scope, summary in groups:
        finish(scope, summary)
        position, value = parse_scope(scope)
        entry = {"by": group_by[position], "value": value, **{key: summary.get(key, empty) for key in _GROUP_PARTS}}
        finished.append((group_order(position, value), entry))
    overall["groups"] = [entry for _, entry in sorted(finished, key=lambda pair: pair[0])]
    return overall
