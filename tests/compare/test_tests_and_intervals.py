"""The paired t interval, the paired t-test and the exact McNemar test against scipy and the formulas."""

import math
import random

import numpy as np
import pytest
from scipy import stats

from beameval.compare.interval import paired_t_interval
from beameval.compare.significance import mcnemar_exact, paired_t_test


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0, 1, n)
    return base, np.clip(base + rng.normal(-0.03, 0.1, n), 0, 1)


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_interval_is_mean_plus_minus_t_times_sd_over_sqrt_n(confidence: float) -> None:
    base, cand = _data(80, 1)
    d = cand - base
    n = len(d)
    # Written out: stderr = sd(d)/sqrt(n); half width = t(1 - a/2, n - 1) * stderr.
    stderr = d.std(ddof=1) / math.sqrt(n)
    half = stats.t.ppf(1 - (1 - confidence) / 2, n - 1) * stderr
    got = paired_t_interval(float(d.mean()), float(d.std(ddof=1)), n, confidence)
    assert got.stderr == pytest.approx(stderr, rel=1e-12)
    assert (got.low, got.high) == (pytest.approx(d.mean() - half, rel=1e-10), pytest.approx(d.mean() + half, rel=1e-10))
    scipy_ci = stats.ttest_rel(cand, base).confidence_interval(confidence)
    assert (got.low, got.high) == (pytest.approx(scipy_ci.low, rel=1e-9), pytest.approx(scipy_ci.high, rel=1e-9))


def test_interval_needs_two_pairs_and_zero_spread_is_a_point() -> None:
    assert paired_t_interval(0.5, None, 1, 0.95) == (None, None, None)
    assert paired_t_interval(0.25, 0.0, 10, 0.95) == (0.0, 0.25, 0.25)


def test_paired_t_test_matches_scipy_ttest_rel() -> None:
    base, cand = _data(60, 2)
    d = cand - base
    expected = stats.ttest_rel(cand, base).pvalue
    assert paired_t_test(float(d.mean()), float(d.std(ddof=1)), len(d)) == pytest.approx(expected, rel=1e-9)


def test_paired_t_test_degenerate_cases() -> None:
    assert paired_t_test(0.0, None, 1) is None
    assert paired_t_test(0.0, 0.0, 5) == 1.0
    assert paired_t_test(-0.1, 0.0, 5) == 0.0


@pytest.mark.parametrize(("regressed", "improved"), [(7, 3), (3, 7), (0, 9), (25, 10), (5, 5), (1, 0)])
def test_mcnemar_exact_is_the_two_sided_binomial_on_discordant_pairs(regressed: int, improved: int) -> None:
    # Written out: p = min(1, 2 * sum_{k <= min(b, c)} C(b + c, k) / 2^(b + c)).
    m = regressed + improved
    tail = sum(math.comb(m, k) for k in range(min(regressed, improved) + 1)) / 2**m
    assert mcnemar_exact(regressed, improved) == pytest.approx(min(1.0, 2 * tail), rel=1e-12)


def test_mcnemar_with_no_discordant_pair_is_one() -> None:
    assert mcnemar_exact(0, 0) == 1.0


def test_mcnemar_is_symmetric_in_direction() -> None:
    rng = random.Random(5)
    for _ in range(20):
        b, c = rng.randrange(0, 40), rng.randrange(0, 40)
        assert mcnemar_exact(b, c) == pytest.approx(mcnemar_exact(c, b))
