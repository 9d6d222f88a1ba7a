"""Corpus scores (one value for the whole dataset, such as bleu.corpus) shaped like any range aggregate."""

from __future__ import annotations

from typing import Any

from beameval.stats.intervals import null_uncertainty
from beameval.stats.summary import ScoreAccumulator

__all__ = ["corpus_result"]


def corpus_result(name: str, value: float | None, confidence_level: float = 0.95) -> dict[str, Any]:
    """Build the aggregate entry of a corpus score.

    A corpus score is one number computed from the whole dataset, not a mean of row
    values, so it has no standard error or interval here (a bootstrap over rows would
    give one; it is not implemented yet).

    Args:
        name: the score name, such as ``"bleu.corpus"``.
        value: the corpus-level value; NaN or None when it could not be computed.
        confidence_level: reported as configured, though no interval is computed.

    Returns:
        The ``AggregateRangeScore`` dict plus ``method: "exact"``: count 1, nan_count 0,
        sum = mean = min = max = value, std_dev and variance 0, every percentile equal
        to value and a single histogram bin ``[value, value]`` holding 1, and null
        uncertainty fields. For NaN: count 0, nan_count 1, null statistics and
        percentiles, and no bins.

    """
    out = ScoreAccumulator().add(value).result(name, confidence_level)
    out.update(null_uncertainty(confidence_level))
    return out
