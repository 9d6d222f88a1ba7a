"""The CR1 clustered standard error of a mean, from per-cluster sums that merge in any order.

With C clusters, cluster c holding n_c values x_i summing to S_c, N = Σ n_c and the
mean m = Σ S_c / N, the CR1 (Liang-Zeger with the C/(C−1) small-sample factor)
standard error of the mean is::

    SE = sqrt(C/(C−1) · Σ_c (S_c − n_c·m)²) / N          (= sqrt(C/(C−1) · Σ_c (Σ_{i∈c}(x_i − m))²) / N)

and the interval is ``m ± t(1−α/2, C−1) · SE`` (docs/STATISTICS.md). It needs only
(n_c, S_c) per cluster, so the pipeline computes it in two stages, neither of which
holds the rows: a keyed combine by cluster value (:class:`ScopedClusterSums`, one
:class:`ClusterSums` for each scope the cluster's rows belong to), then a combine per scope
of the cluster sums (:class:`ClusterAccumulator`). Keying stage one by the cluster alone,
not by (scope, cluster), keeps its key count at the number of clusters: with a
``group_by`` field that cuts across the clusters, (scope, cluster) pairs number about one
per row, and every one of them would cross Beam's shuffle as its own accumulator.

:class:`ClusterAccumulator` keeps a map (n_c, S_c) -> number of clusters while there are
at most ``MAX_EXACT_PAIRS`` distinct pairs (binary scores in clusters of bounded size have
few), evaluated with ``math.fsum`` in sorted order: exact and independent of merge order.
Beyond that it keeps a weighted Welford/Chan state over the cluster means y_c = S_c/n_c
with weights n_c² (then (S_c − n_c·m)² = n_c²(y_c − m)²), accurate to about 1e-12 relative.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from beameval.stats.intervals import t_interval
from beameval.stats.moments import ExactSum, exact_add

__all__ = [
    "MAX_EXACT_PAIRS",
    "ClusterAccumulator",
    "ClusterSums",
    "ClusterTotals",
    "ScopedClusterSums",
    "clustered_fields",
    "cr1_stderr",
]

MAX_EXACT_PAIRS = 100_000
"""Most distinct (n_c, S_c) pairs kept exactly before switching to the weighted moments."""

#: A ClusterSums as plain lists: counts, totals, Shewchuk partials (None while exact), infinite flags.
SumsState = tuple[list[int], list[float], list[list[float] | None], list[bool]]

_EXACT_INT = 2.0**52  # integer-valued floats below this add exactly (and their sum stays below 2**53)


class ClusterTotals(NamedTuple):
    """What the CR1 formula needs: C, N, the mean m and Σ_c (S_c − n_c·m)²."""

    clusters: int
    n: int
    mean: float
    residual_ss: float


def cr1_stderr(clusters: int, n: int, residual_ss: float) -> float:
    """The CR1 clustered standard error ``sqrt(C/(C−1) · Σ_c (S_c − n_c·m)²) / N``.

    Args:
        clusters: C, the number of clusters holding at least one value (at least 2).
        n: N, the number of values.
        residual_ss: ``Σ_c (S_c − n_c·m)²``.

    Returns:
        The standard error of the mean.

    """
    return math.sqrt(clusters / (clusters - 1) * max(residual_ss, 0.0)) / n


def clustered_fields(mean: float, totals: ClusterTotals | None, level: float) -> dict[str, Any]:
    """The stderr and interval fields of a clustered mean (``"clustered-t"``, C − 1 degrees of freedom).

    Args:
        mean: the reported mean (the interval's centre).
        totals: the cluster totals, or None when a value was infinite.
        level: the confidence level.

    Returns:
        stderr, ci_low, ci_high, ci_method; all None when there are fewer than 2 clusters.

    """
    out: dict[str, Any] = {"stderr": None, "ci_low": None, "ci_high": None, "ci_method": None}
    if totals is None or totals.clusters < 2:
        return out
    stderr = cr1_stderr(totals.clusters, totals.n, totals.residual_ss)
    low, high = t_interval(mean, stderr, totals.clusters - 1, level)
    out.update(stderr=stderr, ci_low=low, ci_high=high, ci_method="clustered-t")
    return out


class ClusterSums:
    """Stage one: (n_c, S_c) of every score of one cluster (the rows of one cluster value).

    Sums are exact, so any partition and order of a cluster's rows gives the same S_c:
    integer values (0/1 scores) are summed as floats, which is exact below 2**53; the
    first other value switches that score to Shewchuk partials. Plain lists throughout,
    so an accumulator pickles small and fast between the two stages.

    Args:
        width: the number of scores; values arrive as sequences in score order.

    """

    __slots__ = ("counts", "infinite", "partials", "totals")

    def __init__(self, width: int) -> None:
        self.counts = [0] * width
        self.totals = [0.0] * width
        self.partials: list[list[float] | None] = [None] * width
        self.infinite = [False] * width

    def total(self, index: int) -> float:
        """S_c of the score at ``index``, correctly rounded.

        Args:
            index: the score's position.

        Returns:
            The exact sum, rounded once.

        """
        partials = self.partials[index]
        return self.totals[index] if partials is None else math.fsum(partials)

    def add(self, values: Sequence[float]) -> ClusterSums:
        """Add one row's values (NaN: skipped; infinite: marks the score as having no clustered error).

        Args:
            values: one float per score, in score order.

        Returns:
            This accumulator.

        """
        for i, value in enumerate(values):
            if value - value != 0.0:  # NaN, or ±inf (inf - inf is NaN)
                if value == value:
                    self.infinite[i] = True
                continue
            self.counts[i] += 1
            self._add_exact(i, float(value))
        return self

    def state(self) -> SumsState:
        """The four lists, for pickling several accumulators as plain data (:class:`ScopedClusterSums`)."""
        return self.counts, self.totals, self.partials, self.infinite

    @classmethod
    def from_state(cls, state: SumsState) -> ClusterSums:
        """The accumulator whose :meth:`state` is ``state`` (the lists are taken over, not copied)."""
        sums = cls.__new__(cls)
        sums.counts, sums.totals, sums.partials, sums.infinite = state
        return sums

    def merge_from(self, other: ClusterSums) -> ClusterSums:
        """Fold another partial sum of the same cluster in (``other`` is unchanged).

        Args:
            other: the accumulator to absorb.

        Returns:
            This accumulator.

        """
        for i, count in enumerate(other.counts):
            self.counts[i] += count
            self.infinite[i] = self.infinite[i] or other.infinite[i]
            partials = other.partials[i]
            for part in [other.totals[i]] if partials is None else partials:
                self._add_exact(i, part)
        return self

    def _add_exact(self, i: int, value: float) -> None:
        partials = self.partials[i]
        if partials is None:
            total = self.totals[i]
            if value.is_integer() and abs(total) < _EXACT_INT and abs(value) < _EXACT_INT:
                self.totals[i] = total + value  # integers below 2**53 add exactly
                return
            partials = self.partials[i] = [total]
        exact_add(partials, value)


class ScopedClusterSums:
    """Stage one, keyed by the cluster alone: one :class:`ClusterSums` per scope its rows belong to.

    A row is in the overall scope and in one group scope per ``group_by`` field, so a
    cluster's accumulator holds at most (1 + number of groups it meets) sums, and never
    more scopes than the cluster has rows.

    Args:
        width: the number of scores; values arrive as sequences in score order.

    """

    __slots__ = ("by_scope", "width")

    def __init__(self, width: int) -> None:
        self.width = width
        self.by_scope: dict[str, ClusterSums] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as plain lists: a third of the time and size of pickling the objects, between the stages."""
        return _scoped_sums, (self.width, {scope: sums.state() for scope, sums in self.by_scope.items()})

    def add(self, scopes: Sequence[str], values: Sequence[float]) -> ScopedClusterSums:
        """Add one row's values to each of its scopes.

        Args:
            scopes: the row's scopes (overall first, then its groups).
            values: one float per score, in score order.

        Returns:
            This accumulator.

        """
        for scope in scopes:
            sums = self.by_scope.get(scope)
            if sums is None:
                sums = self.by_scope[scope] = ClusterSums(self.width)
            sums.add(values)
        return self

    def merge_from(self, other: ScopedClusterSums) -> ScopedClusterSums:
        """Fold another partial accumulator of the same cluster in, scope by scope.

        Args:
            other: the accumulator to absorb (its sums may be taken over, not copied).

        Returns:
            This accumulator.

        """
        for scope, theirs in other.by_scope.items():
            mine = self.by_scope.get(scope)
            if mine is None:
                self.by_scope[scope] = theirs
            else:
                mine.merge_from(theirs)
        return self


def _scoped_sums(width: int, states: dict[str, SumsState]) -> ScopedClusterSums:
    """Rebuild a pickled :class:`ScopedClusterSums` (see its ``__reduce__``)."""
    scoped = ScopedClusterSums(width)
    scoped.by_scope = {scope: ClusterSums.from_state(state) for scope, state in states.items()}
    return scoped


class _WeightedMoments:
    """Weighted Welford/Chan state over cluster means y_c = S_c/n_c with weights w_c = n_c²."""

    __slots__ = ("clusters", "m2", "n", "total", "weight", "ybar")

    def __init__(self) -> None:
        self.clusters = 0
        self.n = 0
        self.total = ExactSum()
        self.weight = 0.0
        self.ybar = 0.0
        self.m2 = 0.0

    def absorb(self, clusters: int, n: int, total: ExactSum, weight: float, ybar: float, m2: float) -> None:
        """Chan's parallel update with weights: merge a summary given by its parts."""
        if not clusters:
            return
        self.total.merge(total)
        combined = self.weight + weight
        delta = ybar - self.ybar
        self.ybar += delta * weight / combined
        self.m2 += m2 + delta * delta * self.weight * weight / combined
        self.weight = combined
        self.clusters += clusters
        self.n += n

    def add_pair(self, n_c: int, s_c: float, multiplicity: int) -> None:
        """Absorb ``multiplicity`` clusters of n_c values summing to s_c each (zero spread among them)."""
        total = ExactSum()
        total.add(s_c * multiplicity)
        self.absorb(multiplicity, n_c * multiplicity, total, float(n_c * n_c * multiplicity), s_c / n_c, 0.0)

    def merge(self, other: _WeightedMoments) -> None:
        self.absorb(other.clusters, other.n, other.total, other.weight, other.ybar, other.m2)

    def totals(self) -> ClusterTotals:
        mean = self.total.value / self.n
        return ClusterTotals(self.clusters, self.n, mean, self.m2 + self.weight * (self.ybar - mean) ** 2)


class ClusterAccumulator:
    """Stage two: one score's cluster sums, summarised for the CR1 formula (mergeable, bounded).

    Args:
        max_exact_pairs: distinct (n_c, S_c) pairs kept exactly before switching to moments.

    """

    __slots__ = ("infinite", "max_exact_pairs", "pairs", "weighted")

    def __init__(self, max_exact_pairs: int = MAX_EXACT_PAIRS) -> None:
        self.max_exact_pairs = max_exact_pairs
        self.pairs: dict[tuple[int, float], int] | None = {}
        self.weighted: _WeightedMoments | None = None
        self.infinite = False

    def add(self, n_c: int, s_c: float, infinite: bool = False) -> ClusterAccumulator:
        """Add one cluster's count and sum (a cluster with no values is skipped).

        Args:
            n_c: how many non-NaN values the cluster holds.
            s_c: their sum.
            infinite: the cluster held an infinite value.

        Returns:
            This accumulator.

        """
        self.infinite = self.infinite or infinite
        if not n_c:
            return self
        s_c = s_c + 0.0  # folds -0.0 into 0.0, so equal pairs share a key
        pairs = self.pairs
        if pairs is None:
            assert self.weighted is not None
            self.weighted.add_pair(n_c, s_c, 1)
            return self
        key = (n_c, s_c)
        pairs[key] = pairs.get(key, 0) + 1
        if len(pairs) > self.max_exact_pairs:
            self._to_moments()
        return self

    def merge_from(self, other: ClusterAccumulator) -> ClusterAccumulator:
        """Fold another accumulator in (``other`` is unchanged).

        Args:
            other: the accumulator to absorb.

        Returns:
            This accumulator.

        """
        self.infinite = self.infinite or other.infinite
        if self.pairs is not None and other.pairs is not None:
            for key, count in other.pairs.items():
                self.pairs[key] = self.pairs.get(key, 0) + count
            if len(self.pairs) > self.max_exact_pairs:
                self._to_moments()
            return self
        if self.pairs is not None:
            self._to_moments()
        assert self.weighted is not None
        if other.weighted is not None:
            self.weighted.merge(other.weighted)
        else:
            assert other.pairs is not None
            for (n_c, s_c), count in other.pairs.items():
                self.weighted.add_pair(n_c, s_c, count)
        return self

    def totals(self) -> ClusterTotals | None:
        """C, N, the mean and the residual sum of squares; None after an infinite value or with no values."""
        if self.infinite:
            return None
        if self.pairs is None:
            assert self.weighted is not None
            return self.weighted.totals() if self.weighted.n else None
        if not self.pairs:
            return None
        items = sorted(self.pairs.items())
        clusters = sum(count for _, count in items)
        n = sum(n_c * count for (n_c, _), count in items)
        mean = math.fsum(s_c * count for (_, s_c), count in items) / n
        residual = math.fsum(count * (s_c - n_c * mean) ** 2 for (n_c, s_c), count in items)
        return ClusterTotals(clusters, n, mean, residual)

    def _to_moments(self) -> None:
        """Switch, once and for good, from the exact pair map to the weighted moments."""
        assert self.pairs is not None
        weighted = _WeightedMoments()
        for (n_c, s_c), count in sorted(self.pairs.items()):
            weighted.add_pair(n_c, s_c, count)
        self.weighted = weighted
        self.pairs = None
