"""Holm's step-down adjustment, worked by hand."""

import pytest

from beameval.compare.holm import holm


def test_holm_by_hand() -> None:
    # sorted: 0.005*4 = 0.02; 0.01*3 = 0.03; 0.03*2 = 0.06; 0.04*1 = 0.04 -> max so far 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_keeps_order() -> None:
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([0.2]) == [0.2]
    assert holm([]) == []


def test_holm_is_never_below_the_raw_p_and_is_monotone_in_rank() -> None:
    raw = [0.001, 0.2, 0.013, 0.04, 0.03]
    adjusted = holm(raw)
    assert all(a >= r for a, r in zip(adjusted, raw, strict=True))
    ranked = sorted(range(len(raw)), key=raw.__getitem__)
    assert [adjusted[i] for i in ranked] == sorted(adjusted)
