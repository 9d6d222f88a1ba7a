"""The minimum detectable effect (formula and simulated power) and the rows needed to decide."""

import math

import numpy as np
import pytest
from scipy import stats

from beameval.compare.power import minimum_detectable_effect, rows_needed


def test_mde_formula() -> None:
    sd, n, alpha = 0.3, 400, 0.05
    # Written out: (t(1 - a/2, n - 1) + t(0.8, n - 1)) * sd / sqrt(n).
    expected = (stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
    assert minimum_detectable_effect(sd, n, alpha) == pytest.approx(expected, rel=1e-12)
    assert minimum_detectable_effect(None, 1, alpha) is None


def test_an_effect_of_one_mde_is_detected_about_80_percent_of_the_time() -> None:
    rng = np.random.default_rng(7)
    n, sd, alpha = 60, 1.0, 0.05
    mde = minimum_detectable_effect(sd, n, alpha)
    samples = rng.normal(mde, sd, size=(4000, n))
    p_values = stats.ttest_1samp(samples, 0.0, axis=1).pvalue
    assert float(np.mean(p_values < alpha)) == pytest.approx(0.8, abs=0.03)


@pytest.mark.parametrize(("sd", "effect"), [(0.4, 0.02), (0.4, -0.02), (0.1, 0.05), (1.0, 0.9), (0.3, 0.001)])
def test_rows_needed_is_the_smallest_n_whose_mde_reaches_the_effect(sd: float, effect: float) -> None:
    n = rows_needed(sd, effect, 0.05)
    assert n is not None and n >= 2
    assert minimum_detectable_effect(sd, n, 0.05) <= abs(effect)
    if n > 2:
        assert minimum_detectable_effect(sd, n - 1, 0.05) > abs(effect)
    # close to the normal approximation ((z(0.975) + z(0.8)) * sd / effect)^2
    normal = ((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * sd / effect) ** 2
    assert n == pytest.approx(normal, rel=0.15, abs=6)


def test_rows_needed_unknowable_cases() -> None:
    assert rows_needed(None, 0.1, 0.05) is None
    assert rows_needed(0.3, 0.0, 0.05) is None
    assert rows_needed(0.0, 0.1, 0.05) == 2
