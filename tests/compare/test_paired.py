"""PairedSums: the differences' mean and spread against numpy, counts, and merging shuffled partitions."""

import math
import random

import numpy as np
import pytest

from beameval.compare.paired import PairedSums


def _sums(pairs):
    sums = PairedSums()
    for b, c in pairs:
        sums.add(b, c)
    return sums


def test_mean_sd_and_counts_match_numpy() -> None:
    rng = random.Random(3)
    pairs = [(rng.random(), rng.random()) for _ in range(500)]
    d = np.array([c - b for b, c in pairs])
    sums = _sums(pairs)
    assert sums.n == 500
    assert sums.mean_d == pytest.approx(d.mean(), rel=1e-12)
    assert sums.sd == pytest.approx(d.std(ddof=1), rel=1e-12)
    assert sums.improved == int((d > 0).sum()) and sums.regressed == int((d < 0).sum())
    assert sums.sum_baseline == pytest.approx(sum(b for b, _ in pairs))
    assert not sums.binary


def test_binary_scores_count_discordant_pairs() -> None:
    pairs = [(1.0, 0.0)] * 7 + [(0.0, 1.0)] * 3 + [(1.0, 1.0)] * 20 + [(0.0, 0.0)] * 5
    sums = _sums(pairs)
    assert sums.binary and (sums.regressed, sums.improved) == (7, 3)
    assert sums.mean_d == pytest.approx((3 - 7) / 35)


def test_merging_shuffled_partitions_equals_one_pass() -> None:
    rng = random.Random(11)
    pairs = [(rng.gauss(0.5, 0.2), rng.gauss(0.45, 0.2)) for _ in range(1000)]
    whole = _sums(pairs)
    shuffled = pairs[:]
    rng.shuffle(shuffled)
    cuts = sorted(rng.sample(range(1, 1000), 6))
    parts = [_sums(shuffled[a:b]) for a, b in zip([0, *cuts], [*cuts, 1000], strict=True)]
    merged = PairedSums.merge([PairedSums(), *parts])
    assert (merged.n, merged.improved, merged.regressed) == (whole.n, whole.improved, whole.regressed)
    assert merged.mean_d == pytest.approx(whole.mean_d, rel=1e-12)
    assert merged.m2_d == pytest.approx(whole.m2_d, rel=1e-10)


def test_spread_is_stable_for_small_differences_around_a_large_mean() -> None:
    # d = 1e6 + tiny noise: raw sums of d and d^2 would lose every digit of the variance.
    values = [1e6 + 1e-3 * (i % 7) for i in range(10_000)]
    sums = _sums([(0.0, v) for v in values])
    assert sums.sd == pytest.approx(float(np.std(values, ddof=1)), rel=1e-6)


def test_fewer_than_two_pairs_has_no_spread() -> None:
    assert PairedSums().sd is None and _sums([(0.0, 1.0)]).sd is None
    assert math.isclose(_sums([(0.0, 1.0), (0.0, 1.0)]).sd or 0.0, 0.0)
