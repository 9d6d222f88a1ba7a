"""Mergeable per-score statistics in bounded memory: the pure core a Beam CombineFn delegates to.

A :class:`ScoreAccumulator` starts in **exact** mode: a map value -> count of the distinct
non-NaN values seen. While there are at most ``MAX_EXACT_DISTINCT`` distinct values (a
0/1 score has two, at any row count), every statistic is computed exactly from that map,
walking the distinct values in sorted order with ``math.fsum``, so the result depends only
on the multiset of values: not on row order, nor on how rows were partitioned into
accumulators and merged. It is identical on every runner and with any worker count.

Past that many distinct values the accumulator switches, once and for good, to **sketch**
mode (``method: "ddsketch"``): a DDSketch of relative accuracy ``alpha`` (0.005) for the
percentiles and histogram, a Chan/Welford (count, mean, M2) state for the variance, a
Neumaier-compensated sum, and exact count, NaN count, min and max. Memory is then bounded
by the sketch's bucket cap plus a small batch buffer.

Error bounds in sketch mode:
    * count, nan_count, min, max and p100 are exact; sum, mean and variance are
      accurate to about 1e-12 relative for well-conditioned data (not bit-reproducible
      across partitionings, since float merges are order-dependent).
    * each percentile uses the same (n+1)-rank rule, on sketch estimates of v[floor r]
      and v[floor r + 1]; each estimate is within ``alpha`` relative error of the exact
      value of that rank, so the percentile is within ``alpha`` relative error of the
      exact one when both neighbours have the same sign (otherwise within
      ``alpha * max(|v[floor r]|, |v[floor r + 1]|)``). Values in collapsed buckets
      (beyond the bucket cap's dynamic range of about 8e8) lose that guarantee.
    * histogram counts are estimated by placing each bucket's count in the bin holding
      its representative value: a value within ``alpha`` (relative) of a bin edge may be
      counted in the neighbouring bin. The bin edges themselves are exact.

``None`` inputs count as NaN. Infinite values are counted and enter min, max, the
percentiles and the sum; statistics they make undefined (variance, inf - inf) are
reported as ``None``, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from beameval.stats.distribution import histogram, percentiles
from beameval.stats.fields import base_statistics as _base_statistics
from beameval.stats.intervals import null_uncertainty, uncertainty
from beameval.stats.moments import Moments, exact_moments
from beameval.stats.sketch import DEFAULT_ALPHA, DEFAULT_MAX_BUCKETS, DDSketch

__all__ = [
    "MAX_EXACT_DISTINCT",
    "SKETCH_BATCH",
    "ScoreAccumulator",
    "add",
    "merge",
    "result",
]

MAX_EXACT_DISTINCT = 100_000
"""Most distinct values an accumulator keeps exactly before switching to a sketch."""

SKETCH_BATCH = 4096
"""Values buffered in sketch mode before they are folded into the sketch and moments."""

_INF = math.inf


class ScoreAccumulator:
    """Mergeable, bounded-memory statistics of one score (mutated in place, as Beam allows).

    Args:
        max_exact_distinct: distinct values kept exactly before switching to a sketch.
        alpha: the sketch's relative accuracy.
        max_buckets: the sketch's bucket cap.

    Attributes:
        nan_count: how many NaN (or None) values were added.
        counts: exact mode's distinct value -> count map; None in sketch mode.
        sketch: sketch mode's DDSketch; None in exact mode.
        moments: sketch mode's count/sum/mean/M2 of the finite values; None in exact mode.

    """

    __slots__ = (
        "_buffer",
        "_max",
        "_min",
        "alpha",
        "counts",
        "max_buckets",
        "max_exact_distinct",
        "moments",
        "nan_count",
        "sketch",
    )

    def __init__(
        self,
        *,
        max_exact_distinct: int = MAX_EXACT_DISTINCT,
        alpha: float = DEFAULT_ALPHA,
        max_buckets: int = DEFAULT_MAX_BUCKETS,
    ) -> None:
        self.max_exact_distinct = max_exact_distinct
        self.alpha = alpha
        self.max_buckets = max_buckets
        self.nan_count = 0
        self.counts: dict[float, int] | None = {}
        self.sketch: DDSketch | None = None
        self.moments: Moments | None = None
        self._buffer: list[float] = []  # sketch mode: values not yet folded in
        self._min = _INF  # sketch mode: exact bounds of the values folded in
        self._max = -_INF

    @property
    def method(self) -> str:
        """``"exact"`` or ``"ddsketch"``: how percentiles and the histogram are computed."""
        return "exact" if self.counts is not None else "ddsketch"

    def __repr__(self) -> str:
        size = len(self.counts) if self.counts is not None else self._sketch_parts()[0].num_buckets
        return f"ScoreAccumulator(method={self.method!r}, size={size}, nan_count={self.nan_count})"

    def add(self, value: Any) -> ScoreAccumulator:
        """Add one value: a number (int, float, bool, numpy scalar), NaN or None.

        Args:
            value: the score of one row.

        Returns:
            This accumulator.

        """
        if value is None:
            self.nan_count += 1
            return self
        value = float(value) + 0.0  # + 0.0 folds -0.0 into 0.0
        if value != value:
            self.nan_count += 1
            return self
        counts = self.counts
        if counts is not None:
            seen = counts.get(value)
            if seen is None:
                counts[value] = 1
                if len(counts) > self.max_exact_distinct:
                    self._to_sketch()
            else:
                counts[value] = seen + 1
            return self
        self._buffer.append(value)
        if len(self._buffer) >= SKETCH_BATCH:
            self._flush()
        return self

    def add_all(self, values: Iterable[Any]) -> ScoreAccumulator:
        """Add many values; the same as calling :meth:`add` for each.

        Args:
            values: the scores.

        Returns:
            This accumulator.

        """
        add = self.add
        for value in values:
            add(value)
        return self

    def merge_from(self, other: ScoreAccumulator) -> ScoreAccumulator:
        """Fold another accumulator into this one; ``other`` is left unchanged.

        Args:
            other: the accumulator to absorb (exact or sketch mode).

        Returns:
            This accumulator.

        """
        self.nan_count += other.nan_count
        if self.counts is not None and other.counts is not None:
            counts = self.counts
            for value, count in other.counts.items():
                counts[value] = counts.get(value, 0) + count
            if len(counts) > self.max_exact_distinct:
                self._to_sketch()
            return self
        if self.counts is not None:
            self._to_sketch()
        source = other
        if other.counts is not None:  # convert a copy of the exact one into a sketch
            source = ScoreAccumulator(alpha=self.alpha, max_buckets=self.max_buckets)
            source.counts = other.counts
            source._to_sketch()
        sketch, moments = self._sketch_parts()
        source_sketch, source_moments = source._sketch_parts()
        sketch.merge(source_sketch)
        moments.merge(source_moments)
        self._min = min(self._min, source._min)
        self._max = max(self._max, source._max)
        self._buffer.extend(source._buffer)
        if len(self._buffer) >= SKETCH_BATCH:
            self._flush()
        return self

    @property
    def binary(self) -> bool:
        """True when at least one value was added and every one is 0 or 1 (the Wilson interval applies)."""
        return bool(self.counts) and self.counts is not None and self.counts.keys() <= {0.0, 1.0}

    def finite_moments(self) -> tuple[int, float, float]:
        """``(n, total, m2)`` of the finite values: their count, sum and sum of squared deviations."""
        if self.counts is not None:
            return exact_moments(self.counts.items())
        self._flush()
        moments = self._sketch_parts()[1]
        return moments.n, moments.total, moments.m2

    def result(self, name: str, confidence_level: float = 0.95) -> dict[str, Any]:
        """Build the ``AggregateRangeScore`` dict of results.json (the reference's name), plus ``method``.

        Args:
            name: the score name, ``<metric key>.<output name>``.
            confidence_level: the coverage of the interval (``statistics.confidence_level``).

        Returns:
            name, score_type, count, nan_count, sum, mean, min, max, std_dev, variance,
            sample_variance, sample_std_dev, stderr, ci_low, ci_high, ci_method,
            confidence_level, percentiles, histogram and method, JSON-serialisable, with no NaN.

        """
        out = self.base_statistics(name, "range", confidence_level)
        count = out["count"]
        if not count:
            out.update(percentiles=None, histogram={"bins": []}, method="exact")
            return out
        if self.counts is not None:
            pairs = sorted(self.counts.items())
            bounds = (pairs[0][0], pairs[-1][0])
        else:
            pairs = self._sketch_parts()[0].weighted_values()
            bounds = (self._min, self._max)
        out["percentiles"] = percentiles(pairs, count, *bounds)
        out["histogram"] = histogram(pairs, count, *bounds)
        out["method"] = self.method
        return out

    def base_statistics(self, name: str, score_type: str, confidence_level: float = 0.95) -> dict[str, Any]:
        """Build the fields shared by range and rubric aggregates (no percentiles).

        Args:
            name: the score name.
            score_type: ``"range"`` or ``"rubric"``.
            confidence_level: the coverage of the interval.

        Returns:
            name, score_type, count, nan_count, sum, mean, min, max, std_dev, variance, and
            the naive uncertainty fields of ``beameval.stats.intervals.uncertainty`` (all
            None but confidence_level when an infinity is present).

        """
        if self.counts is not None:
            counts = self.counts
            n, total, m2 = exact_moments(counts.items())
            infinities = (counts.get(_INF, 0), counts.get(-_INF, 0))
            bounds = (min(counts), max(counts)) if counts else (None, None)
        else:
            self._flush()
            sketch, moments = self._sketch_parts()
            n, total, m2 = moments.n, moments.total, moments.m2
            infinities = (sketch.pos_inf, sketch.neg_inf)
            bounds = (self._min, self._max)
        out = _base_statistics(name, score_type, n, total, m2, infinities, bounds, self.nan_count)
        if any(infinities):
            out.update(null_uncertainty(confidence_level))
        else:
            out.update(uncertainty(n, total, m2, self.binary, confidence_level))
        return out

    def _to_sketch(self) -> None:
        """Switch to sketch mode, seeding the sketch and moments from the exact map."""
        counts = self.counts
        assert counts is not None, "already in sketch mode"
        self.sketch = sketch = DDSketch(self.alpha, self.max_buckets)
        for value, count in counts.items():
            sketch.add(value, count)
        sketch.compact()
        self.moments = moments = Moments()
        n, total, m2 = exact_moments(counts.items())
        if n:
            moments.absorb(n, total, total / n, m2)
        if counts:
            self._min = min(counts)
            self._max = max(counts)
        self.counts = None

    def _sketch_parts(self) -> tuple[DDSketch, Moments]:
        """Return the sketch-mode state (only valid in sketch mode)."""
        assert self.sketch is not None and self.moments is not None, "not in sketch mode"
        return self.sketch, self.moments

    def _flush(self) -> None:
        """Fold the sketch-mode buffer into the sketch, moments, min and max."""
        buffer = self._buffer
        if not buffer:
            return
        self._buffer = []
        sketch, moments = self._sketch_parts()
        sketch.add_many(buffer)
        self._min = min(self._min, min(buffer))
        self._max = max(self._max, max(buffer))
        moments.add_batch([v for v in buffer if -_INF < v < _INF])


def add(acc: ScoreAccumulator, value: Any) -> ScoreAccumulator:
    """Add one value to ``acc`` (in place) and return it."""
    return acc.add(value)


def merge(accs: Iterable[ScoreAccumulator]) -> ScoreAccumulator:
    """Merge accumulators into the first one (mutated, as Beam allows) and return it.

    Args:
        accs: the accumulators; the others are left unchanged.

    Returns:
        The first accumulator holding everything, or a new empty one if there are none.

    """
    iterator = iter(accs)
    first = next(iterator, None)
    if first is None:
        return ScoreAccumulator()
    for acc in iterator:
        first.merge_from(acc)
    return first


def result(acc: ScoreAccumulator, name: str, confidence_level: float = 0.95) -> dict[str, Any]:
    """Return the ``AggregateRangeScore`` dict of ``acc`` (see :meth:`ScoreAccumulator.result`)."""
    return acc.result(name, confidence_level)
