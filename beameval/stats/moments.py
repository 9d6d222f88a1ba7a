"""Count, sum, mean and M2 summaries that merge in any order, for the variance in sketch mode.

Sums are Neumaier-compensated and batches are combined with the parallel formula of
Chan, Golub and LeVeque, so merged results agree with a single pass to about 1e-12
relative on well-conditioned data (though not bit for bit: float merges depend on order).
The exact mode does not use this: it sums its distinct values with ``math.fsum``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["ExactSum", "Moments", "exact_add", "exact_moments", "safe_fsum"]


def safe_fsum(values: list[float]) -> float:
    """Sum with ``math.fsum``, returning inf on overflow and NaN for inf - inf.

    Args:
        values: the terms.

    Returns:
        The correctly rounded sum, or inf / NaN where ``math.fsum`` would raise.

    """
    try:
        return math.fsum(values)
    except OverflowError:
        return sum(values)
    except ValueError:
        return math.nan


def exact_moments(pairs: Iterable[tuple[float, int]]) -> tuple[int, float, float]:
    """Compute count, sum and M2 of finite weighted values, independently of their order.

    Args:
        pairs: ``(value, count)``; infinite values are skipped.

    Returns:
        ``(n, total, m2)``: the count, the ``fsum`` of value*count, and the ``fsum`` of
        count*(value - total/n)^2.

    """
    finite = [(v, c) for v, c in pairs if -math.inf < v < math.inf]
    n = sum(c for _, c in finite)
    if not n:
        return 0, 0.0, 0.0
    total = safe_fsum([v * c for v, c in finite])
    mean = total / n
    return n, total, safe_fsum([c * (v - mean) ** 2 for v, c in finite])


class Moments:
    """A mergeable (count, compensated sum, mean, M2) summary of finite values.

    Attributes:
        n: how many values.
        mean: their running mean.
        m2: the sum of squared deviations from that mean.

    """

    __slots__ = ("_sum_hi", "_sum_lo", "m2", "mean", "n")

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0
        self._sum_hi = 0.0
        self._sum_lo = 0.0

    @property
    def total(self) -> float:
        """The compensated sum of the values."""
        return self._sum_hi + self._sum_lo

    def add_batch(self, values: list[float]) -> None:
        """Fold a batch of finite values in, with a two-pass mean and M2 for the batch.

        Args:
            values: finite floats.

        """
        if values:
            total = safe_fsum(values)
            mean = total / len(values)
            self.absorb(len(values), total, mean, safe_fsum([(v - mean) ** 2 for v in values]))

    def merge(self, other: Moments) -> None:
        """Fold another summary in (``other`` is not modified).

        Args:
            other: the summary to absorb.

        """
        self.absorb(other.n, other._sum_hi, other.mean, other.m2, other._sum_lo)

    def absorb(self, n: int, total: float, mean: float, m2: float, total_lo: float = 0.0) -> None:
        """Fold a summary given by its parts in.

        Args:
            n: its count.
            total: its sum.
            mean: its mean.
            m2: its sum of squared deviations from ``mean``.
            total_lo: a compensation term to add to the sum.

        """
        if not n:
            return
        for part in (total, total_lo):
            hi = self._sum_hi + part
            if abs(self._sum_hi) >= abs(part):
                self._sum_lo += (self._sum_hi - hi) + part
            else:
                self._sum_lo += (part - hi) + self._sum_hi
            self._sum_hi = hi
        if not self.n:
            self.n, self.mean, self.m2 = n, mean, m2
            return
        combined = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / combined
        self.m2 += m2 + delta * delta * (self.n * n / combined)
        self.n = combined


def exact_add(partials: list[float], x: float) -> None:
    """Add ``x`` to non-overlapping partials in place, exactly (Shewchuk 1997, Python's ``msum`` recipe).

    Args:
        partials: the partials of a sum so far (``math.fsum(partials)`` is its value).
        x: a finite float.

    """
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


class ExactSum:
    """An exactly mergeable sum of finite floats: Shewchuk's non-overlapping partials.

    ``math.fsum`` keeps the same partials internally but cannot merge two sums; here the
    partials are kept, so adding values or merging sums in any order gives exactly the
    same (correctly rounded) :attr:`value`. A handful of floats in practice.
    """

    __slots__ = ("partials",)

    def __init__(self) -> None:
        self.partials: list[float] = []

    @property
    def value(self) -> float:
        """The correctly rounded sum."""
        return math.fsum(self.partials)

    def add(self, x: float) -> None:
        """Add one finite value exactly (see :func:`exact_add`).

        Args:
            x: a finite float.

        """
        exact_add(self.partials, x)

    def merge(self, other: ExactSum) -> None:
        """Fold another sum in exactly (``other`` is not modified).

        Args:
            other: the sum to absorb.

        """
        for part in other.partials:
            self.add(part)
