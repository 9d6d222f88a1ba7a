"""The tests of a paired comparison: two-sided ones for information, one-sided margin tests for the gate.

For a score with margin ``m`` (the largest drop allowed) and paired differences
``d = candidate − baseline`` with mean ``δ̂`` and standard error ``se``:

* ``p_noninferiority`` tests H0 "δ ≤ −m" (the candidate is worse than allowed):
  ``1 − F_t((δ̂ + m)/se, n−1)``; it is at most ``a`` exactly when the interval's lower end
  ``δ̂ − t(1−a, n−1)·se`` is at least ``−m``, so GO by the interval and GO by the test agree.
* ``p_regression`` tests H0 "δ ≥ −m" (the candidate is within its margin):
  ``F_t((δ̂ + m)/se, n−1)``; for ``m = 0`` and a 0/1 score, the one-sided exact binomial test
  on the discordant pairs (a row that went 1 → 0 counts against, 0 → 1 for; under
  δ = 0 each discordant pair goes either way with probability 1/2).

With ``se = 0`` (every pair moved by the same amount) the interval is the point
``[δ̂, δ̂]`` and the tests are decided by where it lies: this is also how a run compared
with itself comes out GO.

The distribution functions are scipy's special-function kernels (``stdtr`` behind
``scipy.stats.t.cdf``, ``bdtr``/``bdtrc`` behind the binomial tails ``binomtest`` sums):
the same values at a small fraction of the call cost, which lets the error-rate simulation
run the real gate thousands of times in a test.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scipy.special import bdtr, bdtrc, stdtr

__all__ = ["MCNEMAR", "PAIRED_T", "MarginTests", "margin_tests", "mcnemar_exact", "paired_t_test"]

MCNEMAR = "mcnemar-exact"
PAIRED_T = "paired-t"


class MarginTests(NamedTuple):
    """The one-sided p-values of one gated score and the test behind ``p_regression``.

    ``certain`` is True when ``se`` is 0 and ``p_regression`` is 1 by that rule: the score
    cannot be a regression and is left out of the Holm family.
    """

    p_noninferiority: float | None
    p_regression: float | None
    test: str
    certain: bool


def mcnemar_exact(regressed: int, improved: int) -> float:
    """Two-sided exact binomial test of the discordant pairs against p = 1/2 (the information ``p_value``).

    Args:
        regressed: pairs 1 → 0.
        improved: pairs 0 → 1.

    Returns:
        The p-value; 1.0 when no pair is discordant.
    """
    discordant = regressed + improved
    if discordant == 0:
        return 1.0
    # Binomial(discordant, 1/2) is symmetric: the two-sided p is twice the smaller tail, at most 1.
    return min(1.0, 2.0 * float(bdtr(min(regressed, improved), discordant, 0.5)))


def paired_t_test(mean: float, sd: float | None, n: int) -> float | None:
    """Two-sided one-sample t-test of the per-row differences against 0 (``n - 1`` df).

    Args:
        mean: the mean difference.
        sd: the sample standard deviation of the differences.
        n: the number of pairs.

    Returns:
        The p-value; None below two pairs. With zero spread every row moved by exactly
        ``mean``: 1.0 when that is 0, else 0.0.
    """
    if sd is None or n < 2:
        return None
    if sd == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    t = mean / (sd / math.sqrt(n))
    return float(2.0 * stdtr(n - 1, -abs(t)))


def margin_tests(
    mean: float, sd: float | None, n: int, margin: float, binary: bool, regressed: int, improved: int
) -> MarginTests:
    """``p_noninferiority`` and ``p_regression`` of one score at margin ``m`` (see the module docstring).

    Args:
        mean: the mean paired difference.
        sd: its sample standard deviation (None below two pairs).
        n: the number of pairs.
        margin: ``m`` ≥ 0.
        binary: every value on both sides is 0 or 1.
        regressed: pairs that went down (1 → 0 for a 0/1 score).
        improved: pairs that went up.

    Returns:
        Both p-values (None below two pairs), the test name and whether the score is
        certainly not a regression (``se = 0`` and ``δ̂ ≥ −m``).
    """
    exact = binary and margin == 0.0
    test = MCNEMAR if exact else PAIRED_T
    if sd is None or n < 2:
        return MarginTests(None, None, test, False)
    if sd == 0.0:
        within = mean >= -margin
        return MarginTests(0.0 if within else 1.0, 1.0 if within else 0.0, test, within)
    t = (mean + margin) / (sd / math.sqrt(n))
    p_noninferiority = float(stdtr(n - 1, -t))
    if exact:  # P(Binomial(discordant, 1/2) >= regressed)
        discordant = regressed + improved
        p_regression = 1.0 if regressed == 0 else float(bdtrc(regressed - 1, discordant, 0.5))
    else:
        p_regression = float(stdtr(n - 1, t))
    return MarginTests(p_noninferiority, p_regression, test, False)
