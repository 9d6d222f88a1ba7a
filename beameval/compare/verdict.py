"""GO / NO-GO / INCONCLUSIVE: the gating rules (README "Comparing runs") for one score and for a comparison."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

__all__ = ["GO", "INCONCLUSIVE", "NO_GO", "Verdict", "overall_verdict", "score_verdict"]

Verdict = Literal["GO", "NO-GO", "INCONCLUSIVE"]
GO: Verdict = "GO"
NO_GO: Verdict = "NO-GO"
INCONCLUSIVE: Verdict = "INCONCLUSIVE"


def score_verdict(
    ci_low: float | None, ci_high: float | None, p_value: float | None, alpha: float, max_drop: float
) -> Verdict:
    """The verdict on one gated score.

    NO-GO needs both the whole interval below ``-max_drop`` and a (corrected) p-value below
    ``alpha``: the interval says the drop is too large, the test guards the family of scores.
    GO needs only the interval to sit at or above ``-max_drop``: the candidate is shown to be
    no worse than allowed.

    Args:
        ci_low: lower end of the interval on delta (None when it cannot be computed).
        ci_high: upper end.
        p_value: the test's p-value, Holm-corrected when the policy asks.
        alpha: the policy's level.
        max_drop: the allowed drop (>= 0).

    Returns:
        ``NO-GO`` when ``ci_high < -max_drop`` and ``p_value < alpha``; ``GO`` when
        ``ci_low >= -max_drop``; otherwise ``INCONCLUSIVE``.
    """
    if ci_low is None or ci_high is None:
        return INCONCLUSIVE
    if ci_high < -max_drop and p_value is not None and p_value < alpha:
        return NO_GO
    if ci_low >= -max_drop:
        return GO
    return INCONCLUSIVE


def overall_verdict(verdicts: Iterable[Verdict]) -> Verdict:
    """NO-GO if any score is NO-GO, else INCONCLUSIVE if any is, else GO (also when nothing is gated)."""
    seen = set(verdicts)
    if NO_GO in seen:
        return NO_GO
    if INCONCLUSIVE in seen:
        return INCONCLUSIVE
    return GO
