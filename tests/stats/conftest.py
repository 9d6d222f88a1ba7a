"""Fixtures for the stats tests: a deliberately naive implementation of the reference SDK's aggregation rules."""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

import pytest


def reference_percentile(sorted_values: list[float], p: int) -> float:
    """The (n+1)-rank rule on a sorted list, with the rank computed exactly."""
    n = len(sorted_values)
    r = Fraction(p, 100) * (n + 1) - 1
    if r <= 0:
        return sorted_values[0]
    if r >= n - 1:
        return sorted_values[-1]
    lo = math.floor(r)
    a, b = sorted_values[lo], sorted_values[lo + 1]
    return a + (b - a) * float(r - lo)


def reference_histogram(sorted_values: list[float]) -> list[tuple[float, float, int]]:
    """Ten equal-width [lo, hi) bins (last closed); one bin when min == max."""
    mn, mx = sorted_values[0], sorted_values[-1]
    if mn == mx:
        return [(mn, mx, len(sorted_values))]
    width = (mx - mn) / 10
    edges = [mn + i * width for i in range(10)] + [mx]
    counts = [0] * 10
    for v in sorted_values:
        for i in range(10):
            if i == 9 or v < edges[i + 1]:
                counts[i] += 1
                break
    return [(edges[i], edges[i + 1], counts[i]) for i in range(10)]


def reference_stats(values: list[float]) -> dict:
    """Everything section 7.1 lists, computed from the full list of values."""
    kept = [float(v) for v in values if v == v]
    out = {"count": len(kept), "nan_count": len(values) - len(kept)}
    if not kept:
        return out
    s = sorted(kept)
    n = len(s)
    total = sum(kept)
    mean = total / n
    variance = sum((v - mean) ** 2 for v in kept) / n
    out.update(
        sum=total,
        mean=mean,
        min=s[0],
        max=s[-1],
        variance=variance,
        std_dev=math.sqrt(variance),
        percentiles={**{f"p{p}": reference_percentile(s, p) for p in range(10, 100, 10)}, "p100": s[-1]},
        histogram=reference_histogram(s),
    )
    return out


@pytest.fixture(scope="session")
def reference() -> SimpleNamespace:
    """The naive reference: ``reference.stats(values)``, ``.percentile(sorted, p)``, ``.histogram(sorted)``."""
    return SimpleNamespace(stats=reference_stats, percentile=reference_percentile, histogram=reference_histogram)
