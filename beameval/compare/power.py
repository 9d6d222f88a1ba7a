"""Power: the minimum detectable effect, and the paired rows needed to decide a score.

The formula, for a two-sided test at level α with power 1-β on n pairs whose differences
have sample standard deviation s:

    MDE(n) = (t(1-α/2, n-1) + t(1-β, n-1)) · s / sqrt(n)

(the t version of the normal ``(z(1-α/2) + z(1-β)) · σ/√n``; the same spread drives the
McNemar test for 0/1 scores, whose differences are -1, 0 or 1). Rearranged, the rows
needed to tell an effect e from zero are the smallest n with ``MDE(n) <= |e|``, about
``((z(1-α/2) + z(1-β)) · s / e)²``.
"""

from __future__ import annotations

import math

from scipy import stats

__all__ = ["POWER", "minimum_detectable_effect", "rows_needed"]

#: The power the MDE is stated at (README "Comparing runs": 80%).
POWER = 0.8


def minimum_detectable_effect(sd: float | None, n: int, alpha: float, power: float = POWER) -> float | None:
    """The smallest |delta| the test detects with ``power`` at level ``alpha`` given ``n`` pairs.

    Args:
        sd: the sample standard deviation of the per-row differences.
        n: the number of pairs.
        alpha: the two-sided significance level.
        power: the probability of detecting an effect of that size.

    Returns:
        ``(t(1-α/2, n-1) + t(power, n-1)) · sd / sqrt(n)``; None below two pairs.
    """
    if sd is None or n < 2:
        return None
    factor = float(stats.t.ppf(1.0 - alpha / 2.0, n - 1) + stats.t.ppf(power, n - 1))
    return factor * sd / math.sqrt(n)


def rows_needed(sd: float | None, effect: float, alpha: float, power: float = POWER) -> int | None:
    """The fewest pairs whose MDE is at most ``|effect|`` at the observed spread.

    Args:
        sd: the sample standard deviation of the per-row differences.
        effect: the distance to resolve (for a gate: the observed delta's distance from
            ``-max_drop``).
        alpha: the two-sided significance level.
        power: the power.

    Returns:
        The number of pairs (at least 2); None when it cannot be known (no spread
        measured yet, or an effect of exactly zero, which no sample size resolves).
    """
    if sd is None or effect == 0.0 or not math.isfinite(effect):
        return None
    if sd == 0.0:
        return 2
    target = abs(effect)
    # The normal approximation is a lower bound (t quantiles exceed z ones): search up from it.
    z = float(stats.norm.ppf(1.0 - alpha / 2.0) + stats.norm.ppf(power))
    low = max(2, math.ceil((z * sd / target) ** 2))
    if _detects(sd, low, alpha, power, target):
        return low
    high = low * 2
    while not _detects(sd, high, alpha, power, target):
        low, high = high, high * 2
    while high - low > 1:  # MDE(n) decreases in n: bisect on (low fails, high detects]
        middle = (low + high) // 2
        low, high = (low, middle) if _detects(sd, middle, alpha, power, target) else (middle, high)
    return high


def _detects(sd: float, n: int, alpha: float, power: float, target: float) -> bool:
    mde = minimum_detectable_effect(sd, n, alpha, power)
    return mde is not None and mde <= target
