"""Confidence intervals of a mean: Wilson score (binary scores), Student-t, and the field set results.json reports.

Quantiles come from scipy's special functions (``ndtri``, ``stdtrit``: the kernels behind
``scipy.stats.norm.ppf`` and ``scipy.stats.t.ppf``, identical values), imported on first
use so that workers which never build a result do not pay for the import.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

__all__ = [
    "UNCERTAINTY_KEYS",
    "null_uncertainty",
    "t_interval",
    "t_quantile",
    "uncertainty",
    "wilson_interval",
    "z_quantile",
]

#: The fields every per-row aggregate gains, in results.json order.
UNCERTAINTY_KEYS = (
    "sample_variance",
    "sample_std_dev",
    "stderr",
    "ci_low",
    "ci_high",
    "ci_method",
    "confidence_level",
)


@lru_cache(maxsize=64)
def z_quantile(level: float) -> float:
    """The two-sided standard normal critical value ``z = Φ⁻¹(1 − α/2)``, α = 1 − level.

    Args:
        level: the confidence level, in (0, 1).

    Returns:
        ``scipy.stats.norm.ppf(1 - (1 - level) / 2)`` (1.959963984540054 at 0.95).

    """
    from scipy.special import ndtri  # scipy.stats.norm.ppf's own kernel; 0.4 s to import, not 1 s

    return float(ndtri(1.0 - (1.0 - level) / 2.0))


@lru_cache(maxsize=1024)
def t_quantile(level: float, dof: int) -> float:
    """The two-sided Student-t critical value ``t(1 − α/2, dof)``, α = 1 − level.

    Args:
        level: the confidence level, in (0, 1).
        dof: degrees of freedom, at least 1.

    Returns:
        ``scipy.stats.t.ppf(1 - (1 - level) / 2, dof)`` (12.706 for dof 1 at 0.95).

    """
    from scipy.special import stdtrit  # scipy.stats.t.ppf's own kernel, without importing scipy.stats

    return float(stdtrit(dof, 1.0 - (1.0 - level) / 2.0))


def wilson_interval(successes: float, n: int, level: float) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (Wilson 1927).

    With ``p = successes / n`` and ``z = Φ⁻¹(1 − α/2)``::

        centre = (p + z²/(2n)) / (1 + z²/n)
        half   = z / (1 + z²/n) · sqrt(p(1 − p)/n + z²/(4n²))

    Unlike ``p ± z·sqrt(p(1−p)/n)`` it stays inside [0, 1] and keeps its coverage near
    p = 0 or 1 and for small n (8 of 10 at 95%: [0.4902, 0.9433]).

    Args:
        successes: the number of 1s.
        n: the number of values, at least 1.
        level: the confidence level, in (0, 1).

    Returns:
        ``(low, high)``, within [0, 1]; exactly 0 (1) when there are no 1s (no 0s).

    """
    z = z_quantile(level)
    p = successes / n
    z2n = z * z / n
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(max(p * (1.0 - p) / n + z2n / (4.0 * n), 0.0))
    # At p = 0 (p = 1) the bound is exactly 0 (1); rounding must not move it inside.
    low = 0.0 if successes <= 0 else max(centre - half, 0.0)
    high = 1.0 if successes >= n else min(centre + half, 1.0)
    return low, high


def t_interval(mean: float, stderr: float, dof: int, level: float) -> tuple[float, float]:
    """The Student-t interval ``mean ± t(1 − α/2, dof) · stderr``.

    Args:
        mean: the point estimate.
        stderr: its standard error.
        dof: degrees of freedom (n − 1, or C − 1 for clusters), at least 1.
        level: the confidence level, in (0, 1).

    Returns:
        ``(low, high)``.

    """
    half = t_quantile(level, dof) * stderr
    return mean - half, mean + half


def null_uncertainty(level: float) -> dict[str, Any]:
    """The uncertainty fields of a statistic that has none (no values, infinities, a corpus score).

    Args:
        level: the configured confidence level, still reported.

    Returns:
        Every key of ``UNCERTAINTY_KEYS`` None, except ``confidence_level``.

    """
    out: dict[str, Any] = dict.fromkeys(UNCERTAINTY_KEYS)
    out["confidence_level"] = level
    return out


def uncertainty(n: int, total: float, m2: float, binary: bool, level: float) -> dict[str, Any]:
    """The naive (independent values) uncertainty of a mean from its sufficient statistics.

    ``sample_variance = m2 / (n − 1)``, ``stderr = sqrt(sample_variance / n)``; the
    interval is Wilson's for scores whose values are all 0 or 1 (``"wilson"``, defined
    from n = 1), otherwise ``mean ± t(1 − α/2, n − 1) · stderr`` (``"t"``, n ≥ 2).

    Args:
        n: the number of finite values (no infinities: callers report those as null).
        total: their sum.
        m2: the sum of their squared deviations from their mean.
        binary: every value is 0 or 1.
        level: the confidence level.

    Returns:
        The ``UNCERTAINTY_KEYS`` fields; None where undefined (n < 2 for the variance,
        stderr and the t interval; n = 0 for everything).

    """
    out = null_uncertainty(level)
    if n < 1:
        return out
    if n >= 2:
        variance = max(m2, 0.0) / (n - 1)
        stderr = math.sqrt(variance / n)
        out.update(sample_variance=variance, sample_std_dev=math.sqrt(variance), stderr=stderr)
    if binary:
        low, high = wilson_interval(total, n, level)
        out.update(ci_low=low, ci_high=high, ci_method="wilson")
    elif n >= 2:
        low, high = t_interval(total / n, out["stderr"], n - 1, level)
        out.update(ci_low=low, ci_high=high, ci_method="t")
    return out
