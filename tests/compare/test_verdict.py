"""The revised verdict rules, case by case."""

import pytest

from beameval.compare.verdict import overall_verdict, score_verdict


@pytest.mark.parametrize(
    ("low", "p_adjusted", "margin", "expected"),
    [
        (-0.10, 0.001, 0.0, "NO-GO"),  # the adjusted one-sided regression p is below a
        (-0.10, 0.025, 0.0, "INCONCLUSIVE"),  # p == a is not < a
        (-0.10, 0.20, 0.0, "INCONCLUSIVE"),
        (-0.10, 0.001, 0.10, "GO"),  # ci_low == -margin passes
        (0.00, 0.9, 0.0, "GO"),
        (-0.01, 0.5, 0.0, "INCONCLUSIVE"),
        (-0.01, 0.5, 0.02, "GO"),
        (None, None, 0.0, "INCONCLUSIVE"),
        (None, 0.001, 0.0, "NO-GO"),
    ],
)
def test_score_verdict(low, p_adjusted, margin, expected) -> None:
    assert score_verdict(low, p_adjusted, 0.025, margin) == expected


def test_overall_verdict_precedence() -> None:
    assert overall_verdict(["GO", "INCONCLUSIVE", "NO-GO"]) == "NO-GO"
    assert overall_verdict(["GO", "INCONCLUSIVE"]) == "INCONCLUSIVE"
    assert overall_verdict(["GO", "GO"]) == "GO"
    assert overall_verdict(["GO"], ["INCONCLUSIVE"]) == "GO"  # groups are never needed for GO
    assert overall_verdict(["GO"], ["NO-GO"]) == "NO-GO"
