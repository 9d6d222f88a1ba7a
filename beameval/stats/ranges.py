"""Keeping a score's interval inside the range its metric can produce (e.g. F1 in [0, 1]).

A Student-t interval is symmetric around the mean, so on a handful of skewed values (two F1
rows of 0 and 1) it reaches far outside the possible values, [-2.43, 3.93]: a bound no run
could ever attain says nothing and misleads a reader comparing intervals. The Wilson
interval already stays inside [0, 1]; the t and clustered-t ones are clipped here, and
``ci_clipped`` says when that happened (the coverage of the clipped interval is the same:
the cut-off part held no possible value).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLIPPED_METHODS", "clip_to_range"]

#: The interval methods whose ends can leave the range (Wilson's cannot).
CLIPPED_METHODS = ("t", "clustered-t")


def clip_to_range(score: dict[str, Any], bounds: tuple[float, float] | None) -> dict[str, Any]:
    """Record a score's range and clip its t interval to it (in place).

    Args:
        score: one aggregate (of the run or of a group), with ``ci_low``/``ci_high``/``ci_method``.
        bounds: the metric's ``(min, max)`` for this score, or None when unknown.

    Returns:
        ``score`` with ``range`` (``[min, max]`` or None) and ``ci_clipped`` (True when an end moved).
    """
    score["range"] = None if bounds is None else [bounds[0], bounds[1]]
    low, high = score.get("ci_low"), score.get("ci_high")
    clipped = False
    if bounds is not None and score.get("ci_method") in CLIPPED_METHODS and low is not None and high is not None:
        new_low, new_high = min(max(low, bounds[0]), bounds[1]), max(min(high, bounds[1]), bounds[0])
        clipped = (new_low, new_high) != (low, high)
        score["ci_low"], score["ci_high"] = new_low, new_high
    score["ci_clipped"] = clipped
    return score
