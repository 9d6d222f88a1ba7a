"""Prediction-powered inference of the mean human score (Angelopoulos et al. 2023, Science 382).

Many rows carry only the judge's score, a few also a person's. The estimate of the mean
*human* score is the judge's mean over the unlabelled rows plus the mean of
``human − judge`` over the labelled ones (the rectifier: minus the judge's mean error),
unbiased whatever the judge's bias. Its interval is normal, ``θ ± z·√(σ̂²_f/N + σ̂²_r/n)``
with ``σ̂²_f`` the variance of the judge's scores over the N unlabelled rows and ``σ̂²_r``
that of the rectifier over the n labelled rows, both with divisor N (n): the power-tuning
parameter is fixed at ``λ = 1`` (the original estimator), as ``ppi_py.ppi_mean_ci(...,
lam=1)`` computes it.

Inputs are weighted values (value, count), so the same counts that give the confusion
matrix give the estimate, and partial counts from several workers merge by addition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from beameval.stats.intervals import z_quantile

__all__ = ["PPIMean", "ppi_mean"]


@dataclass(frozen=True)
class PPIMean:
    """The prediction-powered mean, its interval (NaN when either side has no rows) and the row counts."""

    mean: float
    ci_low: float
    ci_high: float
    n_labelled: int
    n_unlabelled: int

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready, NaN as null."""
        return {
            "mean": _finite(self.mean),
            "ci_low": _finite(self.ci_low),
            "ci_high": _finite(self.ci_high),
            "n_labelled": self.n_labelled,
            "n_unlabelled": self.n_unlabelled,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _moments(weighted: Iterable[tuple[float, float]]) -> tuple[float, float, float]:
    """(count, mean, population variance) of weighted values."""
    pairs = [(value, count) for value, count in weighted if count]
    total = math.fsum(count for _, count in pairs)
    if total == 0:
        return 0.0, math.nan, math.nan
    mean = math.fsum(value * count for value, count in pairs) / total
    variance = math.fsum(count * (value - mean) ** 2 for value, count in pairs) / total
    return total, mean, variance


def ppi_mean(
    labelled: Iterable[tuple[float, float, float]],
    unlabelled: Iterable[tuple[float, float]],
    level: float = 0.95,
) -> PPIMean:
    """The prediction-powered mean of the human score.

    Args:
        labelled: ``(human, judge, count)`` of the labelled rows.
        unlabelled: ``(judge, count)`` of the rows without a human label.
        level: the interval's confidence level.
    """
    n, rectifier, rectifier_var = _moments((human - judge, count) for human, judge, count in labelled)
    big_n, judge_mean, judge_var = _moments(unlabelled)
    if n == 0 or big_n == 0:
        return PPIMean(math.nan, math.nan, math.nan, round(n), round(big_n))
    mean = judge_mean + rectifier
    half = z_quantile(level) * math.sqrt(judge_var / big_n + rectifier_var / n)
    return PPIMean(mean, mean - half, mean + half, round(n), round(big_n))
