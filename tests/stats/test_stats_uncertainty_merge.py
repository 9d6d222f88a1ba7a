"""Property: uncertainty fields of merged partitions equal one pass (exact mode bit for bit, sketch mode to 1e-12).

Setup: seeded random data (binary, graded with few values, continuous with more distinct
values than the exact cap), split into a random number of random partitions, each
pickled (as a runner would ship it) and merged in a random order, compared with a
single accumulator that saw every value in order. hypothesis is not installed, so the
cases are a seeded loop.
"""

from __future__ import annotations

import math
import pickle
import random

import numpy as np
import pytest
from scipy import stats as sps

from beameval.stats.intervals import UNCERTAINTY_KEYS
from beameval.stats.summary import ScoreAccumulator

CASES = [(seed, kind) for seed in range(12) for kind in ("binary", "graded", "continuous")]


def draw(rng: random.Random, kind: str) -> list[float]:
    n = rng.randint(2, 3000)
    if kind == "binary":
        p = rng.random()
        values = [float(rng.random() < p) for _ in range(n)]
    elif kind == "graded":
        values = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) for _ in range(n)]
    else:
        values = [rng.gauss(0.6, 0.2) for _ in range(n)]
    return [math.nan if rng.random() < 0.05 else v for v in values]


def merged(values: list[float], rng: random.Random, cap: int) -> ScoreAccumulator:
    parts = [ScoreAccumulator(max_exact_distinct=cap) for _ in range(rng.randint(1, 9))]
    for value in values:
        rng.choice(parts).add(value)
    parts = [pickle.loads(pickle.dumps(part)) for part in parts]
    rng.shuffle(parts)
    first = parts[0]
    for other in parts[1:]:
        first.merge_from(other)
    return first


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_random_partitions_and_orders_equal_one_pass(seed: int, kind: str) -> None:
    rng = random.Random(seed)
    values = draw(rng, kind)
    cap = 50 if kind == "continuous" else 100_000  # continuous data goes past the exact cap: sketch mode
    single = ScoreAccumulator(max_exact_distinct=cap).add_all(values).result("s", 0.9)
    for trial in range(3):
        got = merged(values, random.Random(seed * 31 + trial), cap).result("s", 0.9)
        assert got["count"] == single["count"] and got["ci_method"] == single["ci_method"]
        if single["method"] == "exact":
            assert {k: got[k] for k in UNCERTAINTY_KEYS} == {k: single[k] for k in UNCERTAINTY_KEYS}
        else:
            for key in ("sample_variance", "sample_std_dev", "stderr", "ci_low", "ci_high"):
                assert got[key] == pytest.approx(single[key], rel=1e-12, abs=1e-12), key


@pytest.mark.parametrize(("seed", "kind"), CASES[:9])
def test_fields_match_numpy_and_scipy(seed: int, kind: str) -> None:
    rng = random.Random(seed)
    values = draw(rng, kind)
    kept = np.array([v for v in values if v == v])
    got = ScoreAccumulator(max_exact_distinct=50 if kind == "continuous" else 100_000).add_all(values).result("s")
    assert got["sample_variance"] == pytest.approx(kept.var(ddof=1), rel=1e-9)
    assert got["sample_std_dev"] == pytest.approx(kept.std(ddof=1), rel=1e-9)
    assert got["stderr"] == pytest.approx(sps.sem(kept), rel=1e-9)
    binary = set(kept.tolist()) <= {0.0, 1.0}
    assert got["ci_method"] == ("wilson" if binary else "t")
    if not binary:
        low, high = sps.t.interval(0.95, len(kept) - 1, loc=kept.mean(), scale=sps.sem(kept))
        assert (got["ci_low"], got["ci_high"]) == pytest.approx((low, high), rel=1e-9)


def test_infinite_values_give_null_uncertainty() -> None:
    got = ScoreAccumulator().add_all([1.0, math.inf, 0.5]).result("s")
    assert all(got[key] is None for key in UNCERTAINTY_KEYS if key != "confidence_level")
