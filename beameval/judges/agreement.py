"""Agreement between a judge and human labels, from a confusion matrix of counts.

Everything is computed from ``confusion[h][j]``: how many labelled rows a person put in
category ``h`` and the judge in category ``j``. The categories are ordered (a rubric's
levels by value, a whole-number range score's integers), ``values[k]`` is category
``k``'s number. Counts add, so partial matrices from any number of workers merge by
element-wise sums and the statistics below do not depend on how the rows were split.

* **Cohen's kappa, quadratically weighted**: ``1 − Σ w·O / Σ w·E`` with
  ``w = (i − j)²`` over the category *indices* and ``E`` the outer product of the
  marginals over ``n``: the definition of ``sklearn.metrics.cohen_kappa_score(...,
  weights="quadratic", labels=categories)``.
* **Its 95% interval**: the large-sample variance of weighted kappa of Fleiss, Cohen and
  Everitt (1969, Psychological Bulletin 72(5)), with the agreement weights
  ``1 − (i − j)²/(K − 1)²``, and ``κ ± z·√var`` (what ``statsmodels``' ``cohens_kappa``
  reports). Clipped to ``[−1, 1]``.
* **Krippendorff's alpha** for two coders and no missing values: the coincidence matrix is
  ``C + Cᵀ``; ``α = 1 − (n − 1)·Σ o·δ² / Σ n_c·n_k·δ²`` with ``δ² = (v_c − v_k)²``
  (interval) or the ordinal distance over the marginal counts (Krippendorff 2011,
  "Computing Krippendorff's alpha-reliability"), as the ``krippendorff`` package computes.

An undefined statistic (every rating in one category) is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from beameval.stats.intervals import z_quantile

__all__ = ["Agreement", "agreement", "cohen_kappa", "kappa_interval", "krippendorff_alpha"]

AlphaLevel = Literal["interval", "ordinal"]
NAN = math.nan


@dataclass(frozen=True)
class Agreement:
    """The agreement statistics of one judge score (NaN where undefined)."""

    n: int
    kappa: float
    kappa_ci_low: float
    kappa_ci_high: float
    alpha: float
    accuracy: float
    mean_human: float
    mean_judge: float
    bias: float


def _marginals(confusion: Sequence[Sequence[float]]) -> tuple[list[float], list[float], float]:
    rows = [math.fsum(row) for row in confusion]
    cols = [math.fsum(col) for col in zip(*confusion, strict=True)]
    return rows, cols, math.fsum(rows)


def cohen_kappa(confusion: Sequence[Sequence[float]]) -> float:
    """Quadratically weighted Cohen's kappa (weights by category index), NaN when undefined."""
    rows, cols, n = _marginals(confusion)
    size = len(confusion)
    if n == 0:
        return NAN
    observed = math.fsum((i - j) ** 2 * confusion[i][j] for i in range(size) for j in range(size))
    expected = math.fsum((i - j) ** 2 * rows[i] * cols[j] / n for i in range(size) for j in range(size))
    return NAN if expected == 0 else 1.0 - observed / expected


def kappa_interval(confusion: Sequence[Sequence[float]], level: float = 0.95) -> tuple[float, float]:
    """The Fleiss–Cohen–Everitt large-sample interval of quadratically weighted kappa."""
    rows, cols, n = _marginals(confusion)
    size = len(confusion)
    kappa = cohen_kappa(confusion)
    if math.isnan(kappa) or size < 2:
        return NAN, NAN
    p_row = [r / n for r in rows]
    p_col = [c / n for c in cols]
    weight = [[1.0 - (i - j) ** 2 / (size - 1) ** 2 for j in range(size)] for i in range(size)]
    w_row = [math.fsum(p_col[j] * weight[i][j] for j in range(size)) for i in range(size)]
    w_col = [math.fsum(p_row[i] * weight[i][j] for i in range(size)) for j in range(size)]
    expected = math.fsum(weight[i][j] * p_row[i] * p_col[j] for i in range(size) for j in range(size))
    spread = math.fsum(
        confusion[i][j] / n * (weight[i][j] - (w_row[i] + w_col[j]) * (1.0 - kappa)) ** 2
        for i in range(size)
        for j in range(size)
    )
    variance = (spread - (kappa - expected * (1.0 - kappa)) ** 2) / ((1.0 - expected) ** 2 * n)
    half = z_quantile(level) * math.sqrt(max(variance, 0.0))
    return max(kappa - half, -1.0), min(kappa + half, 1.0)


def krippendorff_alpha(
    confusion: Sequence[Sequence[float]], values: Sequence[float], level_of_measurement: AlphaLevel
) -> float:
    """Krippendorff's alpha of two coders over the paired units, NaN when undefined."""
    size = len(confusion)
    coincidence = [[confusion[c][k] + confusion[k][c] for k in range(size)] for c in range(size)]
    totals = [math.fsum(row) for row in coincidence]
    n = math.fsum(totals)
    if n <= 1:
        return NAN
    if level_of_measurement == "interval":
        delta = [[(values[c] - values[k]) ** 2 for k in range(size)] for c in range(size)]
    else:
        delta = [[_ordinal_distance(totals, c, k) for k in range(size)] for c in range(size)]
    observed = math.fsum(coincidence[c][k] * delta[c][k] for c in range(size) for k in range(size))
    expected = math.fsum(totals[c] * totals[k] * delta[c][k] for c in range(size) for k in range(size))
    return NAN if expected == 0 else 1.0 - (n - 1) * observed / expected


def _ordinal_distance(totals: Sequence[float], c: int, k: int) -> float:
    low, high = min(c, k), max(c, k)
    between = math.fsum(totals[low : high + 1])
    return (between - (totals[c] + totals[k]) / 2.0) ** 2


def agreement(
    confusion: Sequence[Sequence[float]],
    values: Sequence[float],
    level_of_measurement: AlphaLevel,
    level: float = 0.95,
) -> Agreement:
    """Every agreement statistic of one judge score from its confusion counts.

    Args:
        confusion: ``confusion[h][j]``, rows the human's category, columns the judge's.
        values: each category's number, in category order.
        level_of_measurement: alpha's distance, ``interval`` (range scores) or ``ordinal`` (rubrics).
        level: the kappa interval's confidence level.
    """
    rows, cols, n = _marginals(confusion)
    size = len(confusion)
    if n == 0:
        return Agreement(0, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN)
    low, high = kappa_interval(confusion, level)
    mean_human = math.fsum(rows[k] * values[k] for k in range(size)) / n
    mean_judge = math.fsum(cols[k] * values[k] for k in range(size)) / n
    return Agreement(
        n=round(n),
        kappa=cohen_kappa(confusion),
        kappa_ci_low=low,
        kappa_ci_high=high,
        alpha=krippendorff_alpha(confusion, values, level_of_measurement),
        accuracy=math.fsum(confusion[k][k] for k in range(size)) / n,
        mean_human=mean_human,
        mean_judge=mean_judge,
        bias=mean_judge - mean_human,
    )
