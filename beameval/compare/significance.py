"""Is the difference real: the exact McNemar test for 0/1 scores, the paired t-test otherwise."""

from __future__ import annotations

import math

from scipy import stats

__all__ = ["MCNEMAR", "PAIRED_T", "mcnemar_exact", "paired_t_test"]

MCNEMAR = "mcnemar-exact"
PAIRED_T = "paired-t"


def mcnemar_exact(regressed: int, improved: int) -> float:
    """Two-sided exact binomial test of the discordant pairs against p = 1/2.

    Only rows that changed carry information about a 0/1 score's shift; under no
    difference each changed row is equally likely to go either way.

    Args:
        regressed: pairs 1 → 0.
        improved: pairs 0 → 1.

    Returns:
        The p-value; 1.0 when no pair is discordant.
    """
    discordant = regressed + improved
    if discordant == 0:
        return 1.0
    return float(stats.binomtest(improved, discordant, 0.5, alternative="two-sided").pvalue)


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
    return float(2.0 * stats.t.sf(abs(t), n - 1))
