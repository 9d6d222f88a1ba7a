"""A mergeable DDSketch, so percentiles of a score with unboundedly many distinct values fit in bounded memory.

DDSketch (Masson, Rim and Lee, VLDB 2019) maps a positive value x to the bucket
``k = ceil(log(x) / log(gamma))`` with ``gamma = (1 + alpha) / (1 - alpha)``; bucket k
covers (gamma^(k-1), gamma^k] and is represented by ``2 * gamma^k / (gamma + 1) = (1 - alpha) * gamma^k``, which
is within relative error ``alpha`` of every value in the bucket. Negative values use a
second store keyed on their magnitude; zeros and infinities are counted apart.

Sketches with the same alpha merge by adding bucket counts, so a merged sketch equals
the sketch of the concatenated stream, whatever the partitioning (exactly, as long as no
collapse was needed). The number of buckets
is capped (``max_buckets``, positive and negative stores together): past the cap, the
lowest-magnitude buckets of the larger store are collapsed into its lowest kept bucket,
which only degrades the accuracy of those smallest-magnitude values. At alpha = 0.005 one
store of 2048 buckets spans a dynamic range of about 8e8, so typical scores never collapse.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable

__all__ = ["DEFAULT_ALPHA", "DEFAULT_MAX_BUCKETS", "DDSketch"]

DEFAULT_ALPHA = 0.005
"""Relative accuracy of a sketch: estimates are within 0.5% of the value they stand for."""

DEFAULT_MAX_BUCKETS = 4096
"""Most buckets (both signs together) a sketch keeps once compacted."""

_INF = math.inf


class DDSketch:
    """A relative-error quantile sketch over floats of any sign.

    Args:
        alpha: the relative accuracy, in (0, 1).
        max_buckets: the bucket cap enforced by :meth:`compact` (at least 2).

    Attributes:
        positive: bucket key -> count for values > 0.
        negative: bucket key (of the magnitude) -> count for values < 0.
        zero_count: how many values were exactly zero.
        pos_inf: how many values were +inf.
        neg_inf: how many values were -inf.

    """

    __slots__ = (
        "_inv_log_gamma",
        "_log_gamma",
        "_log_rep_factor",
        "alpha",
        "max_buckets",
        "neg_inf",
        "negative",
        "pos_inf",
        "positive",
        "zero_count",
    )

    def __init__(self, alpha: float = DEFAULT_ALPHA, max_buckets: int = DEFAULT_MAX_BUCKETS) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        if max_buckets < 2:
            raise ValueError(f"max_buckets must be at least 2, got {max_buckets!r}")
        self.alpha = alpha
        self.max_buckets = max_buckets
        self._log_gamma = math.log((1.0 + alpha) / (1.0 - alpha))
        self._inv_log_gamma = 1.0 / self._log_gamma
        self._log_rep_factor = math.log1p(-alpha)  # 2 / (gamma + 1) == 1 - alpha
        self.positive: dict[int, int] = {}
        self.negative: dict[int, int] = {}
        self.zero_count = 0
        self.pos_inf = 0
        self.neg_inf = 0

    @property
    def count(self) -> int:
        """The number of values in the sketch."""
        return sum(self.positive.values()) + sum(self.negative.values()) + self.zero_count + self.pos_inf + self.neg_inf

    @property
    def num_buckets(self) -> int:
        """The number of buckets held (positive and negative stores)."""
        return len(self.positive) + len(self.negative)

    def add(self, value: float, count: int = 1) -> None:
        """Add ``count`` copies of a non-NaN value; call :meth:`compact` after many adds.

        Args:
            value: the value (not NaN).
            count: its multiplicity.

        """
        if value > 0.0:
            if value == _INF:
                self.pos_inf += count
                return
            key = math.ceil(math.log(value) * self._inv_log_gamma)
            store = self.positive
        elif value < 0.0:
            if value == -_INF:
                self.neg_inf += count
                return
            key = math.ceil(math.log(-value) * self._inv_log_gamma)
            store = self.negative
        else:
            self.zero_count += count
            return
        store[key] = store.get(key, 0) + count

    def add_many(self, values: Iterable[float]) -> None:
        """Add non-NaN values one by one, then compacts.

        Args:
            values: the values (none of them NaN).

        """
        log, ceil, mul = math.log, math.ceil, self._inv_log_gamma
        positive, negative = self.positive, self.negative
        for value in values:
            if 0.0 < value < _INF:
                key = ceil(log(value) * mul)
                positive[key] = positive.get(key, 0) + 1
            elif -_INF < value < 0.0:
                key = ceil(log(-value) * mul)
                negative[key] = negative.get(key, 0) + 1
            else:
                self.add(value)
        self.compact()

    def merge(self, other: DDSketch) -> None:
        """Add another sketch's buckets into this one (``other`` is not modified).

        Args:
            other: a sketch with the same alpha.

        Raises:
            ValueError: if the sketches have different alphas.

        """
        if other.alpha != self.alpha:
            raise ValueError(f"cannot merge sketches with alpha {self.alpha} and {other.alpha}")
        for mine, theirs in ((self.positive, other.positive), (self.negative, other.negative)):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count
        self.zero_count += other.zero_count
        self.pos_inf += other.pos_inf
        self.neg_inf += other.neg_inf
        self.compact()

    def compact(self) -> None:
        """Collapse the lowest-magnitude buckets until at most ``max_buckets`` remain."""
        n_pos, n_neg = len(self.positive), len(self.negative)
        if n_pos + n_neg <= self.max_buckets:
            return
        half = self.max_buckets // 2
        if n_neg <= half:
            pos_target, neg_target = self.max_buckets - n_neg, n_neg
        elif n_pos <= half:
            pos_target, neg_target = n_pos, self.max_buckets - n_pos
        else:
            pos_target, neg_target = self.max_buckets - half, half
        _collapse_lowest(self.positive, pos_target)
        _collapse_lowest(self.negative, neg_target)

    def representative(self, key: int) -> float:
        """Return the value standing for positive bucket ``key`` (negate for the negative store).

        Args:
            key: a bucket key.

        Returns:
            ``2 * gamma^key / (gamma + 1)``, within ``alpha`` of every value in the bucket.

        """
        try:
            return math.exp(key * self._log_gamma + self._log_rep_factor)
        except OverflowError:  # the bucket holding values within alpha of the largest float
            return sys.float_info.max

    def weighted_values(self) -> list[tuple[float, int]]:
        """List ``(representative value, count)`` for every non-empty bucket, ascending.

        Returns:
            -inf, the negative buckets, zero, the positive buckets and +inf, in value
            order, each with its count; the counts sum to :attr:`count`.

        """
        out: list[tuple[float, int]] = []
        if self.neg_inf:
            out.append((-_INF, self.neg_inf))
        out.extend((-self.representative(k), self.negative[k]) for k in sorted(self.negative, reverse=True))
        if self.zero_count:
            out.append((0.0, self.zero_count))
        out.extend((self.representative(k), self.positive[k]) for k in sorted(self.positive))
        if self.pos_inf:
            out.append((_INF, self.pos_inf))
        return out


def _collapse_lowest(store: dict[int, int], target: int) -> None:
    """Merge the lowest keys of ``store`` into its lowest kept key so ``target`` keys remain."""
    excess = len(store) - target
    if excess <= 0:
        return
    keys = sorted(store)
    floor = keys[excess]
    store[floor] += sum(store.pop(key) for key in keys[:excess])
