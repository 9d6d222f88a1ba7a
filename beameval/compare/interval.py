"""The paired Student-t interval on per-row differences (README "Comparing runs")."""

from __future__ import annotations

import math
from typing import NamedTuple

from scipy import stats

__all__ = ["PairedInterval", "paired_t_interval"]


class PairedInterval(NamedTuple):
    """``delta ± t(1-α/2, n-1) · stderr``; every field None when fewer than two pairs."""

    stderr: float | None
    low: float | None
    high: float | None


def paired_t_interval(mean: float, sd: float | None, n: int, confidence: float) -> PairedInterval:
    """The two-sided interval on the mean difference.

    Args:
        mean: the mean of the per-row differences.
        sd: their sample standard deviation (n-1), None below two pairs.
        n: the number of pairs.
        confidence: e.g. 0.95.

    Returns:
        ``stderr = sd/sqrt(n)`` and the interval with ``n - 1`` degrees of freedom; a zero
        spread gives the point interval ``[mean, mean]``.
    """
    if sd is None or n < 2:
        return PairedInterval(None, None, None)
    stderr = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * stderr
    return PairedInterval(stderr, mean - half, mean + half)
