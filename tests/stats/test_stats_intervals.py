"""Wilson and Student-t intervals and the naive uncertainty fields, against textbook values and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from beameval.stats.intervals import (
    UNCERTAINTY_KEYS,
    t_interval,
    t_quantile,
    uncertainty,
    wilson_interval,
    z_quantile,
)
from beameval.stats.moments import exact_moments


def wilson_by_hand(x: int, n: int, level: float) -> tuple[float, float]:
    """Wilson (1927) as the quadratic's roots: solve (p̂ − p)² = z² p(1 − p) / n for p."""
    z = sps.norm.ppf(1 - (1 - level) / 2)
    a = 1 + z * z / n
    b = -(2 * x / n + z * z / n)
    c = (x / n) ** 2
    root = math.sqrt(b * b - 4 * a * c)
    return (-b - root) / (2 * a), (-b + root) / (2 * a)


def test_wilson_textbook_eight_of_ten() -> None:
    # Newcombe (1998), Table I / Agresti & Coull (1998): 8/10 at 95% -> 0.4902 to 0.9433.
    low, high = wilson_interval(8, 10, 0.95)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)


@pytest.mark.parametrize(("x", "n"), [(0, 10), (10, 10), (1, 1), (0, 1), (37, 120), (99, 120), (500, 1000)])
@pytest.mark.parametrize("level", [0.8, 0.9, 0.95, 0.99])
def test_wilson_matches_the_quadratic_roots(x: int, n: int, level: float) -> None:
    low, high = wilson_interval(x, n, level)
    want_low, want_high = wilson_by_hand(x, n, level)
    assert low == pytest.approx(max(want_low, 0.0), abs=1e-12)
    assert high == pytest.approx(min(want_high, 1.0), abs=1e-12)
    assert 0.0 <= low <= x / n <= high <= 1.0


def test_wilson_at_the_edges_stays_in_range() -> None:
    assert wilson_interval(0, 10, 0.95)[0] == 0.0
    assert wilson_interval(10, 10, 0.95)[1] == 1.0
    # 0/10 at 95%: the upper bound is z²/(n + z²).
    z2 = sps.norm.ppf(0.975) ** 2
    assert wilson_interval(0, 10, 0.95)[1] == pytest.approx(z2 / (10 + z2), abs=1e-12)


def test_quantiles_come_from_scipy() -> None:
    assert z_quantile(0.95) == pytest.approx(1.959963984540054, abs=1e-15)
    assert t_quantile(0.95, 1) == pytest.approx(12.706204736174705, abs=1e-12)
    assert t_quantile(0.99, 9) == pytest.approx(sps.t.ppf(0.995, 9), abs=1e-15)


def test_t_interval_matches_scipy_interval() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(0.4, 0.2, size=37)
    mean, sem = float(values.mean()), float(sps.sem(values))
    want = sps.t.interval(0.9, len(values) - 1, loc=mean, scale=sem)
    assert t_interval(mean, sem, len(values) - 1, 0.9) == pytest.approx(want, abs=1e-12)


def test_uncertainty_for_continuous_values_is_student_t() -> None:
    values = [0.25, 0.5, 0.5, 0.75, 1.0, 0.0, 0.3]
    n, total, m2 = exact_moments((v, 1) for v in values)
    got = uncertainty(n, total, m2, binary=False, level=0.95)
    assert list(got) == list(UNCERTAINTY_KEYS)
    arr = np.array(values)
    assert got["sample_variance"] == pytest.approx(arr.var(ddof=1), rel=1e-12)
    assert got["sample_std_dev"] == pytest.approx(arr.std(ddof=1), rel=1e-12)
    assert got["stderr"] == pytest.approx(sps.sem(arr), rel=1e-12)
    low, high = sps.t.interval(0.95, len(arr) - 1, loc=arr.mean(), scale=sps.sem(arr))
    assert (got["ci_low"], got["ci_high"]) == pytest.approx((low, high), abs=1e-12)
    assert got["ci_method"] == "t"
    assert got["confidence_level"] == 0.95


def test_uncertainty_for_binary_values_is_wilson() -> None:
    got = uncertainty(10, 8.0, 1.6, binary=True, level=0.95)
    assert got["ci_method"] == "wilson"
    assert (got["ci_low"], got["ci_high"]) == pytest.approx(wilson_by_hand(8, 10, 0.95), abs=1e-12)
    assert got["stderr"] == pytest.approx(math.sqrt(1.6 / 9 / 10), rel=1e-12)


def test_uncertainty_edge_counts() -> None:
    empty = uncertainty(0, 0.0, 0.0, binary=False, level=0.9)
    assert empty == {**dict.fromkeys(UNCERTAINTY_KEYS), "confidence_level": 0.9}
    one = uncertainty(1, 0.7, 0.0, binary=False, level=0.95)
    assert one["sample_variance"] is None and one["stderr"] is None and one["ci_method"] is None
    one_binary = uncertainty(1, 1.0, 0.0, binary=True, level=0.95)
    assert one_binary["ci_method"] == "wilson" and one_binary["stderr"] is None
    assert (one_binary["ci_low"], one_binary["ci_high"]) == pytest.approx(wilson_by_hand(1, 1, 0.95), abs=1e-12)
    constant = uncertainty(5, 1.5, 0.0, binary=False, level=0.95)
    assert constant["stderr"] == 0.0 and constant["ci_low"] == constant["ci_high"] == pytest.approx(0.3)
