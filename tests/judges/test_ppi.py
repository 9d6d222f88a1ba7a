"""The prediction-powered mean against ppi_py.ppi_mean_ci(lam=1), and its coverage with a biased judge."""

import random
from collections import Counter

import numpy as np
import pytest
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate

from beameval.judges.ppi import ppi_mean

TOL = 1e-9


def biased_dataset(rng, n_labelled, n_unlabelled):
    """Human scores 1-5; the judge adds one point half the time (capped at 5): biased upward."""

    def judged(human):
        return min(5, human + (1 if rng.random() < 0.5 else 0))

    labelled = [(h, judged(h)) for h in (rng.choice([1, 2, 3, 3, 4, 5]) for _ in range(n_labelled))]
    hidden = [rng.choice([1, 2, 3, 3, 4, 5]) for _ in range(n_unlabelled)]
    return labelled, [judged(h) for h in hidden]


def ours(labelled, unlabelled):
    pairs = Counter(labelled)
    return ppi_mean(
        [(h, j, c) for (h, j), c in pairs.items()], [(j, c) for j, c in Counter(unlabelled).items()], level=0.95
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_equals_ppi_py_with_lam_1(seed):
    labelled, unlabelled = biased_dataset(random.Random(seed), 40 * seed, 500)
    y = np.array([h for h, _ in labelled], dtype=float)
    yhat = np.array([j for _, j in labelled], dtype=float)
    yhat_unlabelled = np.array(unlabelled, dtype=float)
    low, high = ppi_mean_ci(y, yhat, yhat_unlabelled, alpha=0.05, lam=1)
    point = ppi_mean_pointestimate(y, yhat, yhat_unlabelled, lam=1)
    result = ours(labelled, unlabelled)
    assert result.mean == pytest.approx(float(np.ravel(point)[0]), abs=TOL)
    assert (result.ci_low, result.ci_high) == pytest.approx((float(low[0]), float(high[0])), abs=TOL)
    assert (result.n_labelled, result.n_unlabelled) == (40 * seed, 500)


def test_covers_the_human_mean_at_least_93_percent_with_a_biased_judge():
    """1,000 seeded datasets: the naive judge mean misses (bias ~ +0.4), the PPI interval covers."""
    true_mean = sum([1, 2, 3, 3, 4, 5]) / 6
    covered = naive_covered = 0
    rng = random.Random(2023)
    for _ in range(1000):
        labelled, unlabelled = biased_dataset(rng, 60, 400)
        result = ours(labelled, unlabelled)
        covered += result.ci_low <= true_mean <= result.ci_high
        naive_covered += abs(sum(unlabelled) / len(unlabelled) - true_mean) < 0.1
    assert covered / 1000 >= 0.93
    assert naive_covered / 1000 < 0.05


def test_without_labelled_or_unlabelled_rows_the_estimate_is_undefined():
    result = ppi_mean([], [(3.0, 10)])
    assert result.as_dict() == {"mean": None, "ci_low": None, "ci_high": None, "n_labelled": 0, "n_unlabelled": 10}
