"""The verdict rules, case by case."""

import pytest

from beameval.compare.verdict import overall_verdict, score_verdict


@pytest.mark.parametrize(
    ("low", "high", "p", "max_drop", "expected"),
    [
        (-0.10, -0.05, 0.001, 0.0, "NO-GO"),  # whole interval below -max_drop and significant
        (-0.10, -0.05, 0.20, 0.0, "INCONCLUSIVE"),  # below, but the (corrected) p-value is not < alpha
        (-0.10, -0.05, 0.05, 0.0, "INCONCLUSIVE"),  # p == alpha is not < alpha
        (-0.10, -0.05, 0.001, 0.06, "INCONCLUSIVE"),  # ci_high -0.05 is not < -0.06; ci_low -0.10 < -0.06
        (-0.10, -0.05, 0.001, 0.10, "GO"),  # ci_low == -max_drop passes
        (0.00, 0.04, 0.5, 0.0, "GO"),
        (-0.01, 0.03, 0.5, 0.0, "INCONCLUSIVE"),
        (-0.01, 0.03, 0.5, 0.02, "GO"),
        (None, None, None, 0.0, "INCONCLUSIVE"),
    ],
)
def test_score_verdict(low, high, p, max_drop, expected) -> None:
    assert score_verdict(low, high, p, 0.05, max_drop) == expected


def test_overall_verdict_precedence() -> None:
    assert overall_verdict(["GO", "INCONCLUSIVE", "NO-GO"]) == "NO-GO"
    assert overall_verdict(["GO", "INCONCLUSIVE"]) == "INCONCLUSIVE"
    assert overall_verdict(["GO", "GO"]) == "GO"
    assert overall_verdict([]) == "GO"
