"""Repeated sampling (``params.repeats: K``): per-row means, within-row variance, pass@k and pass^k.

With K samples per row the row (the question), not the sample, is the unit of
uncertainty: the standard error is that of the R per-row means. Two mergeable stages:
:class:`RowSamples` gathers one row's K values per score (a keyed combine by
``row_index``; K values, never the dataset), and :class:`RepeatAccumulator` folds the
resulting :class:`RowUnit` values of many rows.

Formulas (docs/STATISTICS.md), for a row of n samples of which c are correct:

* pass@k = 1 − C(n−c, k) / C(n, k): the unbiased estimator of "at least one of k
  samples is correct" (Chen et al. 2021, "Evaluating Large Language Models Trained on Code");
* pass^k = C(c, k) / C(n, k): "all of k samples are correct" (Yao et al. 2024, τ-bench);

each averaged over the rows whose n = K samples are all non-NaN, for binary scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from beameval.stats.intervals import t_interval
from beameval.stats.summary import ScoreAccumulator

__all__ = [
    "RepeatAccumulator",
    "RowSamples",
    "RowUnit",
    "ScoreUnit",
    "pass_at_k",
    "pass_hat_k",
    "sample_variance",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator ``1 − C(n−c, k) / C(n, k)`` for one row.

    Args:
        n: samples of the row.
        c: correct samples among them.
        k: samples drawn, 1 ≤ k ≤ n.

    Returns:
        The probability that at least one of k samples drawn without replacement is correct.

    """
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The pass^k estimator ``C(c, k) / C(n, k)`` for one row.

    Args:
        n: samples of the row.
        c: correct samples among them.
        k: samples drawn, 1 ≤ k ≤ n.

    Returns:
        The probability that all of k samples drawn without replacement are correct.

    """
    return math.comb(c, k) / math.comb(n, k)


def sample_variance(values: Sequence[float]) -> float | None:
    """The n − 1 sample variance ``Σ(x − x̄)² / (n − 1)``, two-pass over the sorted values.

    Args:
        values: finite floats.

    Returns:
        The variance, or None for fewer than 2 values.

    """
    if len(values) < 2:
        return None
    ordered = sorted(values)
    mean = math.fsum(ordered) / len(ordered)
    return math.fsum((v - mean) ** 2 for v in ordered) / (len(ordered) - 1)


class ScoreUnit(NamedTuple):
    """One score of one row: the mean of its non-NaN samples and what pass@k needs."""

    mean: float
    """Mean of the non-NaN samples; NaN when there are none."""
    variance: float | None
    """n − 1 sample variance of the non-NaN samples; None for fewer than 2."""
    binary: bool
    """Every non-NaN sample is 0 or 1 (True when there are none)."""
    correct: int | None
    """How many samples are 1, when every sample is non-NaN and binary; else None."""


class RowUnit(NamedTuple):
    """A row after its samples are combined: the keys it carries and one ScoreUnit per score."""

    keys: Any
    samples: int
    scores: tuple[ScoreUnit, ...]


class RowSamples:
    """Stage one: the K sample values of one row, per score (the row's own keys carried along)."""

    __slots__ = ("keys", "samples", "values")

    def __init__(self) -> None:
        self.keys: Any = None
        self.samples = 0
        self.values: list[list[float]] = []

    def add(self, keys: Any, scores: Sequence[float]) -> RowSamples:
        """Add one sample.

        Args:
            keys: what the row is grouped and clustered by (the same for every sample of a row).
            scores: one float per score, in score order (NaN where the sample failed).

        Returns:
            This accumulator.

        """
        self.keys = keys
        self.samples += 1
        if not self.values:
            self.values = [[] for _ in scores]
        for bucket, value in zip(self.values, scores, strict=True):
            if value == value:
                bucket.append(float(value))
        return self

    def merge_from(self, other: RowSamples) -> RowSamples:
        """Fold the other samples of the same row in (``other`` is unchanged).

        Args:
            other: the accumulator to absorb.

        Returns:
            This accumulator.

        """
        if other.samples:
            self.keys = other.keys
            if not self.values:
                self.values = [[] for _ in other.values]
            for bucket, values in zip(self.values, other.values, strict=True):
                bucket.extend(values)
            self.samples += other.samples
        return self

    def unit(self) -> RowUnit:
        """The row's per-score means, variances and correct counts (independent of sample order)."""
        units = []
        for values in self.values:
            ordered = sorted(values)
            binary = all(v in (0.0, 1.0) for v in ordered)
            mean = math.fsum(ordered) / len(ordered) if ordered else math.nan
            correct = int(sum(ordered)) if binary and len(ordered) == self.samples else None
            units.append(ScoreUnit(mean, sample_variance(ordered), binary, correct))
        return RowUnit(self.keys, self.samples, tuple(units))


class RepeatAccumulator:
    """Stage two, one score: per-row means and variances, and correct-count tallies for pass@k.

    Args:
        repeats: K, the samples per row.

    """

    __slots__ = ("binary", "correct", "means", "repeats", "variances")

    def __init__(self, repeats: int) -> None:
        self.repeats = repeats
        self.means = ScoreAccumulator()
        self.variances = ScoreAccumulator()
        self.correct = [0] * (repeats + 1)  # rows with c correct samples, for complete binary rows
        self.binary = True

    def add(self, unit: ScoreUnit) -> RepeatAccumulator:
        """Fold one row's unit of this score in.

        Args:
            unit: the row's ScoreUnit.

        Returns:
            This accumulator.

        """
        self.means.add(unit.mean)
        if unit.variance is not None:
            self.variances.add(unit.variance)
        self.binary = self.binary and unit.binary
        if unit.correct is not None and unit.correct <= self.repeats:
            self.correct[unit.correct] += 1
        return self

    def merge_from(self, other: RepeatAccumulator) -> RepeatAccumulator:
        """Fold another accumulator of the same score in (``other`` is unchanged).

        Args:
            other: the accumulator to absorb.

        Returns:
            This accumulator.

        """
        self.means.merge_from(other.means)
        self.variances.merge_from(other.variances)
        self.binary = self.binary and other.binary
        self.correct = [a + b for a, b in zip(self.correct, other.correct, strict=True)]
        return self

    def fields(self, mean: float, level: float) -> dict[str, Any]:
        """The repeat statistics of one score.

        ``stderr = sqrt(s² / R)`` over the R per-row means (rows with a non-NaN sample) and
        ``mean ± t(1−α/2, R−1) · stderr``; ``within_row_variance`` is the mean of the rows'
        sample variances; binary scores add ``pass_at_k`` and ``pass_hat_k`` for k = 1..K.

        Args:
            mean: the reported mean over all non-NaN samples (the interval's centre).
            level: the confidence level.

        Returns:
            stderr, ci_low, ci_high, ci_method, within_row_variance, and for binary scores
            pass_at_k and pass_hat_k (dicts keyed "1".."K"; null values without complete rows).

        """
        out: dict[str, Any] = {"stderr": None, "ci_low": None, "ci_high": None, "ci_method": None}
        rows, total, m2 = self.means.finite_moments()
        if rows >= 2:
            stderr = math.sqrt(max(m2, 0.0) / (rows - 1) / rows)
            low, high = t_interval(mean, stderr, rows - 1, level)
            out.update(stderr=stderr, ci_low=low, ci_high=high, ci_method="t")
        n_var, var_total, _ = self.variances.finite_moments()
        out["within_row_variance"] = var_total / n_var if n_var else None
        if self.binary and rows:
            out["pass_at_k"] = self._averaged(pass_at_k)
            out["pass_hat_k"] = self._averaged(pass_hat_k)
        return out

    def _averaged(self, estimator: Any) -> dict[str, float | None]:
        """The estimator for k = 1..K averaged over complete rows, from the correct-count tallies."""
        rows = sum(self.correct)
        n = self.repeats
        if not rows:
            return {str(k): None for k in range(1, n + 1)}
        return {
            str(k): math.fsum(count * estimator(n, c, k) for c, count in enumerate(self.correct) if count) / rows
            for k in range(1, n + 1)
        }
