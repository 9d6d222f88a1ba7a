"""Agreement statistics against independent implementations: scikit-learn, krippendorff, statsmodels."""

import math
import random

import krippendorff
import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import cohens_kappa

from beameval.judges.agreement import agreement, cohen_kappa, kappa_interval, krippendorff_alpha

TOL = 1e-9


def confusion_of(human, judge, categories):
    index = {value: k for k, value in enumerate(categories)}
    matrix = [[0.0] * len(categories) for _ in categories]
    for h, j in zip(human, judge, strict=True):
        matrix[index[h]][index[j]] += 1
    return matrix


def rated(seed, categories, n, noise):
    """Human ratings and a judge that copies them with probability 1 - noise, else picks at random."""
    rng = random.Random(seed)
    human = [rng.choice(categories) for _ in range(n)]
    judge = [h if rng.random() > noise else rng.choice(categories) for h in human]
    return human, judge


CASES = [
    ("range 1-5, good judge", [1, 2, 3, 4, 5], 200, 0.2, 1),
    ("range 1-5, poor judge", [1, 2, 3, 4, 5], 60, 0.9, 2),
    ("range 0-10, small", list(range(11)), 35, 0.5, 3),
    ("rubric values 0, 0.5, 1", [0.0, 0.5, 1.0], 150, 0.3, 4),
]


@pytest.mark.parametrize(("title", "categories", "n", "noise", "seed"), CASES, ids=[c[0] for c in CASES])
def test_kappa_and_alpha_equal_sklearn_and_krippendorff(title, categories, n, noise, seed):
    human, judge = rated(seed, categories, n, noise)
    confusion = confusion_of(human, judge, categories)
    names = {value: f"level {value}" for value in categories}  # a rubric's labels, ordered by value
    kappa = cohen_kappa_score(
        [names[h] for h in human], [names[j] for j in judge], weights="quadratic", labels=[names[c] for c in categories]
    )
    assert cohen_kappa(confusion) == pytest.approx(kappa, abs=TOL)
    data = np.array([human, judge], dtype=float)
    for level in ("interval", "ordinal"):
        expected = krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=categories)
        assert krippendorff_alpha(confusion, categories, level) == pytest.approx(expected, abs=TOL)


def test_a_class_never_used_by_one_rater_and_ties():
    """The judge never says 1 or 5 and the person never says 3; ties (equal ratings) are many."""
    categories = [1, 2, 3, 4, 5]
    human = [1, 1, 2, 2, 4, 4, 5, 5, 2, 4] * 4
    judge = [2, 2, 2, 3, 4, 3, 4, 4, 2, 4] * 4
    confusion = confusion_of(human, judge, categories)
    assert cohen_kappa(confusion) == pytest.approx(
        cohen_kappa_score(human, judge, weights="quadratic", labels=categories), abs=TOL
    )
    data = np.array([human, judge], dtype=float)
    for level in ("interval", "ordinal"):
        expected = krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=categories)
        assert krippendorff_alpha(confusion, categories, level) == pytest.approx(expected, abs=TOL)


def test_the_kappa_interval_is_fleiss_cohen_everitt_as_statsmodels_computes_it():
    categories = [1, 2, 3, 4, 5]
    human, judge = rated(7, categories, 120, 0.4)
    confusion = confusion_of(human, judge, categories)
    oracle = cohens_kappa(np.array(confusion), wt="quadratic")
    assert cohen_kappa(confusion) == pytest.approx(oracle.kappa, abs=TOL)
    low, high = kappa_interval(confusion)
    assert (low, high) == pytest.approx((oracle.kappa_low, oracle.kappa_upp), abs=TOL)


def test_the_summary_fields_and_merging_partial_counts():
    categories = [0.0, 1.0]
    human, judge = rated(11, categories, 90, 0.5)
    whole = confusion_of(human, judge, categories)
    first, second = confusion_of(human[:37], judge[:37], categories), confusion_of(human[37:], judge[37:], categories)
    merged = [[a + b for a, b in zip(r1, r2, strict=True)] for r1, r2 in zip(first, second, strict=True)]
    result = agreement(merged, categories, "ordinal")
    assert result == agreement(whole, categories, "ordinal")
    assert result.n == 90
    assert result.accuracy == pytest.approx(sum(h == j for h, j in zip(human, judge, strict=True)) / 90, abs=TOL)
    assert result.mean_human == pytest.approx(sum(human) / 90, abs=TOL)
    assert result.bias == pytest.approx((sum(judge) - sum(human)) / 90, abs=TOL)


def test_undefined_statistics_are_nan():
    everyone_says_three = [[0.0, 0.0], [0.0, 12.0]]
    result = agreement(everyone_says_three, [1.0, 3.0], "interval")
    assert math.isnan(result.kappa) and math.isnan(result.alpha) and result.accuracy == 1.0
    empty = agreement([[0.0, 0.0], [0.0, 0.0]], [1.0, 3.0], "interval")
    assert empty.n == 0 and math.isnan(empty.kappa)
