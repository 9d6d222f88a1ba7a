"""The statistics every aggregate shares, built in one place so range and rubric scores agree on shape."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["base_statistics", "clean"]


def clean(value: float | None) -> float | None:
    """Convert to a plain float (numpy scalars included), with NaN as None.

    Args:
        value: a number or None.

    Returns:
        ``float(value)``, or None for None and NaN.

    """
    if value is None or value != value:
        return None
    return float(value)


def base_statistics(
    name: str,
    score_type: str,
    n: int,
    total: float,
    m2: float,
    infinities: tuple[int, int],
    bounds: tuple[float | None, float | None],
    nan_count: int,
) -> dict[str, Any]:
    """Build name, score_type, count, nan_count, sum, mean, min, max, std_dev and variance.

    Args:
        name: the score name.
        score_type: ``"range"`` or ``"rubric"``.
        n: the number of finite values.
        total: their sum.
        m2: the sum of their squared deviations from their mean.
        infinities: how many values were +inf and -inf.
        bounds: the minimum and maximum of all non-NaN values.
        nan_count: how many values were NaN.

    Returns:
        The fields in the order results.json lists them. count = n + infinities. sum..variance are None
        when count is 0; the variance is the population variance m2 / n, None once an
        infinity is present (as is the sum of +inf and -inf). Never NaN.

    """
    pos_inf, neg_inf = infinities
    count = n + pos_inf + neg_inf
    out: dict[str, Any] = {
        "name": name,
        "score_type": score_type,
        "count": count,
        "nan_count": nan_count,
    }
    if not count:
        out.update(sum=None, mean=None, min=None, max=None, std_dev=None, variance=None)
        return out
    if pos_inf or neg_inf:
        total = math.nan if pos_inf and neg_inf else math.inf if pos_inf else -math.inf
        variance = math.nan
    else:
        variance = max(m2 / n, 0.0)
    out.update(
        sum=clean(total),
        mean=clean(total / count),
        min=clean(bounds[0]),
        max=clean(bounds[1]),
        std_dev=clean(math.sqrt(variance) if variance == variance else variance),
        variance=clean(variance),
    )
    return out
