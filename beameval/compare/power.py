"""Power: the minimum detectable effect, and the paired rows needed to decide a score.

The formula, for a two-sided test at level α with power 1-β on n pairs whose differences
have sample standard deviation s:

    MDE(n) = (t(1-α/2, n-1) + t(1-β, n-1)) · s / sqrt(n)

(the t version of the normal ``(z(1-α/2) + z(1-β)) · σ/√n``; the same spread drives the
McNemar test for 0/1 scores, whose differences are -1, 0 or 1). Rearranged, the rows
needed to tell an effect e from zero are the smallest n with ``MDE(n) <= |e|``, about
``((z(1-α/2) + z(1-β)) · s / e)²``.

The gate's margin tests are one-sided at ``a = α/2`` (``α = 1 − confidence_level``), and
``t(1−a)`` is the same quantile as the two-sided ``t(1−α/2)``: so ``rows_needed(s, δ̂ + m, α)``
is the pairs at which the one-sided test at margin ``m`` decides a true difference of ``δ̂``
with 80% power, towards GO when ``δ̂ > −m`` and towards NO-GO when ``δ̂ < −m``.
"""

from __future__ import annotations

import math

from scipy.special import ndtri, stdtrit

__all__ = ["MAX_ROWS", "POWER", "minimum_detectable_effect", "rows_needed"]

#: The power the MDE is stated at (README "Comparing runs": 80%).
POWER = 0.8
#: Beyond this many pairs "rows needed" is reported as unknowable: no evaluation is that large.
MAX_ROWS = 10**12


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
    factor = float(stdtrit(n - 1, 1.0 - alpha / 2.0) + stdtrit(n - 1, power))  # scipy.stats.t.ppf's kernel
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
        measured yet, or an effect of zero, which no sample size resolves, or one so small
        against the spread that it would take more than ``MAX_ROWS`` pairs).
    """
    if sd is None or effect == 0.0 or not math.isfinite(effect):
        return None
    if sd == 0.0:
        return 2
    target = abs(effect)
    # The normal approximation is a lower bound (t quantiles exceed z ones): search up from it.
    z = float(ndtri(1.0 - alpha / 2.0) + ndtri(power))
    approximate = (z * sd / target) ** 2
    if not approximate <= MAX_ROWS:  # an effect at the rounding level of the mean (a same-mean rerun), or NaN
        return None
    low = max(2, math.ceil(approximate))
    if _detects(sd, low, alpha, power, target):
        return low
    # The t answer is a few pairs above the normal one: gallop up from it, then bisect (low fails, high detects].
    step = 1
    while not _detects(sd, low + step, alpha, power, target):
        low, step = low + step, step * 2
    high = low + step
    while high - low > 1:  # MDE(n) decreases in n
        middle = (low + high) // 2
        low, high = (low, middle) if _detects(sd, middle, alpha, power, target) else (middle, high)
    return high


def _detects(sd: float, n: int, alpha: float, power: float, target: float) -> bool:
    mde = minimum_detectable_effect(sd, n, alpha, power)
    return mde is not None and mde <= target
