"""GO / NO-GO / INCONCLUSIVE: the revised rules for one gated score and for the whole comparison."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

__all__ = ["GO", "INCONCLUSIVE", "NO_GO", "Verdict", "overall_verdict", "score_verdict"]

Verdict = Literal["GO", "NO-GO", "INCONCLUSIVE"]
GO: Verdict = "GO"
NO_GO: Verdict = "NO-GO"
INCONCLUSIVE: Verdict = "INCONCLUSIVE"


def score_verdict(ci_low: float | None, p_regression_adjusted: float | None, level: float, margin: float) -> Verdict:
    """The verdict on one gated score.

    GO needs the interval's lower end at or above ``-margin`` (the non-inferiority test at
    ``level``, uncorrected: GO needs every gated score to pass, which already bounds the
    chance of a wrong GO by the largest single one). NO-GO needs the Holm-adjusted
    one-sided regression p-value below ``level``, so a false NO-GO over the whole family
    has probability at most ``level``.

    Args:
        ci_low: lower end of the interval on delta (None when it cannot be computed).
        p_regression_adjusted: the regression test's p-value, adjusted over the family.
        level: the one-sided level ``a = (1 - confidence_level) / 2``.
        margin: the allowed drop ``m`` (>= 0).

    Returns:
        ``GO`` when ``ci_low >= -margin``; ``NO-GO`` when ``p_regression_adjusted < level``;
        otherwise ``INCONCLUSIVE``.
    """
    if ci_low is not None and ci_low >= -margin:
        return GO
    if p_regression_adjusted is not None and p_regression_adjusted < level:
        return NO_GO
    return INCONCLUSIVE


def overall_verdict(gated: Iterable[Verdict], groups: Iterable[Verdict] = ()) -> Verdict:
    """NO-GO if any score or group score is NO-GO, else GO if every gated score is GO, else INCONCLUSIVE.

    Args:
        gated: the verdicts of the comparison's gated scores.
        groups: the verdicts of its gated group scores (they can only make it NO-GO).
    """
    seen = set(gated)
    if NO_GO in seen or NO_GO in set(groups):
        return NO_GO
    if INCONCLUSIVE in seen:
        return INCONCLUSIVE
    return GO
