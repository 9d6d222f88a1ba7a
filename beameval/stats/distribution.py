"""Percentiles and histogram from weighted sorted values, shared by the exact and sketch modes.

Both accumulator modes reduce to a list of ``(value, count)`` pairs sorted by value: the
distinct values themselves (exact mode) or the sketch buckets' representative values
(sketch mode). Nothing here expands the counts into a list of rows.

Rank rule (the reference SDK's): with the values sorted as v[0..n-1] and
r = p/100 * (n+1) - 1, the percentile is v[0] when r <= 0, v[n-1] when r >= n-1, and the
linear interpolation between v[floor r] and v[floor r + 1] otherwise. The rank is computed
in exact integer arithmetic (numerator p*(n+1) - 100 over 100), so the interpolation
fraction is the correctly rounded float: for {0, 1, 1}, p30 is 0.2 and p40 is 0.6, not
0.19999999999999996 and 0.6000000000000001 as plain float arithmetic would give.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

__all__ = [
    "HISTOGRAM_BINS",
    "histogram",
    "interpolate",
    "percentiles",
]


HISTOGRAM_BINS = 10
"""Number of equal-width histogram bins between min and max."""


def interpolate(a: float, b: float, fraction: float) -> float:
    """Interpolate linearly from ``a`` towards ``b``.

    Args:
        a: the lower neighbour.
        b: the upper neighbour (b >= a).
        fraction: the position between them, in [0, 1).

    Returns:
        ``a + (b - a) * fraction``; exactly ``a`` when the neighbours are equal or the
        fraction is 0. Where infinities make that NaN, the nearer neighbour.

    """
    if a == b or fraction == 0.0:
        return a
    value = a + (b - a) * fraction
    if value != value:  # only with infinite neighbours
        return a if fraction < 0.5 else b
    return value


def percentiles(pairs: Sequence[tuple[float, int]], n: int, lo: float, hi: float) -> dict[str, float]:
    """Compute p10..p90 and p100 with the reference's (n+1)-rank rule.

    Args:
        pairs: ``(value, count)`` with positive counts, sorted by value, counts summing
            to ``n``.
        n: the number of values (>= 1).
        lo: the exact minimum: v[0], and the lower clamp for estimated values.
        hi: the exact maximum: v[n-1], p100, and the upper clamp for estimated values.

    Returns:
        ``{"p10": ..., ..., "p90": ..., "p100": hi}`` with plain floats.

    """
    values = [v for v, _ in pairs]
    cumulative = list(accumulate(c for _, c in pairs))

    def value_at(index: int) -> float:
        if index <= 0:
            return lo
        if index >= n - 1:
            return hi
        value = values[bisect_right(cumulative, index)]
        return lo if value < lo else hi if value > hi else value

    out: dict[str, float] = {}
    for p in range(10, 100, 10):
        numerator = p * (n + 1) - 100  # r = numerator / 100
        if numerator <= 0:
            value = lo
        elif numerator >= 100 * (n - 1):
            value = hi
        else:
            index, remainder = divmod(numerator, 100)
            value = interpolate(value_at(index), value_at(index + 1), remainder / 100)
        out[f"p{p}"] = float(value)
    out["p100"] = float(hi)
    return out


def histogram(
    pairs: Sequence[tuple[float, int]], n: int, lo: float, hi: float
) -> dict[str, list[dict[str, float | int]]]:
    """Build the 10-bin equal-width histogram over [lo, hi].

    Bin i is ``[lo + i*width, lo + (i+1)*width)`` with ``width = (hi - lo) / 10``; the
    last bin is closed and its upper bound is ``hi`` itself. Bounds are raw floats
    (0.30000000000000004, not 0.3). Each value is placed by comparing it with those
    very bounds, so the counts always agree with the reported edges. When ``lo == hi``
    (or the range is not finite) there is a single bin ``[lo, hi]`` holding ``n``.

    Args:
        pairs: ``(value, count)`` sorted by value; values outside [lo, hi] (sketch
            estimates) are clamped into the first or last bin.
        n: the number of values (>= 1).
        lo: the minimum.
        hi: the maximum.

    Returns:
        ``{"bins": [{"lower_bound", "upper_bound", "count"}, ...]}``.

    """
    width = (hi - lo) / HISTOGRAM_BINS
    if lo == hi or not math.isfinite(width) or width == 0.0:
        return {"bins": [{"lower_bound": float(lo), "upper_bound": float(hi), "count": n}]}
    edges = [lo + i * width for i in range(HISTOGRAM_BINS)]
    edges.append(hi)
    counts = [0] * HISTOGRAM_BINS
    for value, count in pairs:
        index = bisect_right(edges, value, 0, HISTOGRAM_BINS) - 1
        counts[index if index > 0 else 0] += count
    return {
        "bins": [
            {"lower_bound": float(edges[i]), "upper_bound": float(edges[i + 1]), "count": counts[i]}
            for i in range(HISTOGRAM_BINS)
        ]
    }
