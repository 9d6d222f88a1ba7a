"""Repeats: pass@k and pass^k against brute-force enumeration, per-row units, and mergeable scope statistics."""

from __future__ import annotations

import itertools
import math
import pickle
import random

import numpy as np
import pytest
from scipy import stats as sps

from beameval.stats.repeats import RepeatAccumulator, RowSamples, pass_at_k, pass_hat_k, sample_variance

NAN = math.nan


def enumerate_subsets(outcomes: list[int], k: int) -> tuple[float, float]:
    """P(at least one correct) and P(all correct) over every k-subset of the samples, by counting."""
    subsets = list(itertools.combinations(outcomes, k))
    return (
        sum(any(s) for s in subsets) / len(subsets),
        sum(all(s) for s in subsets) / len(subsets),
    )


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_estimators_equal_enumeration_over_subsets(n: int) -> None:
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            at_least_one, all_correct = enumerate_subsets(outcomes, k)
            assert pass_at_k(n, c, k) == pytest.approx(at_least_one, abs=1e-15)
            assert pass_hat_k(n, c, k) == pytest.approx(all_correct, abs=1e-15)


def test_known_values() -> None:
    # Chen et al. (2021): n = 10, c = 3, k = 5 -> 1 - C(7,5)/C(10,5) = 1 - 21/252.
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    assert pass_hat_k(10, 3, 2) == pytest.approx(3 / 45)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_hat_k(4, 4, 4) == 1.0


def test_sample_variance_is_ddof_one() -> None:
    assert sample_variance([1.0]) is None
    assert sample_variance([0.2, 0.5, 0.9]) == pytest.approx(np.var([0.2, 0.5, 0.9], ddof=1), rel=1e-14)


def test_row_unit_is_independent_of_sample_order() -> None:
    samples = [(1.0, 0.25), (0.0, NAN), (1.0, 0.75), (1.0, 0.5)]
    units = []
    for seed in range(5):
        rng = random.Random(seed)
        order = samples[:]
        rng.shuffle(order)
        parts = [RowSamples() for _ in range(2)]
        for sample in order:
            rng.choice(parts).add("keys", sample)
        merged = pickle.loads(pickle.dumps(parts[0])).merge_from(parts[1])
        units.append(merged.unit())
    assert all(unit == units[0] for unit in units)
    unit = units[0]
    assert unit.keys == "keys" and unit.samples == 4
    binary, graded = unit.scores
    assert (binary.mean, binary.correct, binary.binary) == (0.75, 3, True)
    assert binary.variance == pytest.approx(np.var([1, 0, 1, 1], ddof=1))
    assert graded.mean == pytest.approx(0.5) and graded.correct is None and not graded.binary


def simulate(rows: int, k: int, rng: random.Random) -> list[list[float]]:
    data = []
    for _ in range(rows):
        p = rng.random()
        data.append([NAN if rng.random() < 0.08 else float(rng.random() < p) for _ in range(k)])
    return data


def fold(data: list[list[float]], k: int, rng: random.Random) -> RepeatAccumulator:
    """Rows -> units -> scope accumulators in random partitions, merged in random order."""
    accs = [RepeatAccumulator(k) for _ in range(rng.randint(1, 4))]
    for row in data:
        unit = RowSamples()
        for value in row:
            unit.add(None, (value,))
        rng.choice(accs).add(unit.unit().scores[0])
    rng.shuffle(accs)
    for other in accs[1:]:
        accs[0].merge_from(other)
    return accs[0]


def test_scope_fields_match_independent_formulas() -> None:
    k, rng = 4, random.Random(9)
    data = simulate(150, k, rng)
    acc = fold(data, k, rng)
    flat = [v for row in data for v in row if v == v]
    mean = float(np.mean(flat))
    got = acc.fields(mean, 0.95)
    row_means = [np.mean([v for v in row if v == v]) for row in data if any(v == v for v in row)]
    se = sps.sem(row_means)
    half = sps.t.ppf(0.975, len(row_means) - 1) * se
    assert got["stderr"] == pytest.approx(se, rel=1e-12)
    assert (got["ci_low"], got["ci_high"]) == pytest.approx((mean - half, mean + half), rel=1e-12)
    assert got["ci_method"] == "t"
    variances = [np.var([v for v in row if v == v], ddof=1) for row in data if sum(v == v for v in row) >= 2]
    assert got["within_row_variance"] == pytest.approx(np.mean(variances), rel=1e-12)
    complete = [row for row in data if all(v == v for v in row)]
    for j in range(1, k + 1):
        want_at = np.mean([enumerate_subsets([int(v) for v in row], j)[0] for row in complete])
        want_hat = np.mean([enumerate_subsets([int(v) for v in row], j)[1] for row in complete])
        assert got["pass_at_k"][str(j)] == pytest.approx(want_at, rel=1e-12)
        assert got["pass_hat_k"][str(j)] == pytest.approx(want_hat, rel=1e-12)
    assert got["pass_at_k"]["1"] == pytest.approx(got["pass_hat_k"]["1"])


@pytest.mark.parametrize("seed", range(10))
def test_partitions_and_orders_do_not_change_the_fields(seed: int) -> None:
    k = 3
    data = simulate(60, k, random.Random(seed))
    mean = 0.5
    single = fold(data, k, random.Random(0)).fields(mean, 0.9)
    for trial in range(3):
        assert fold(data, k, random.Random(seed * 100 + trial)).fields(mean, 0.9) == single


def test_graded_scores_get_no_pass_at_k_and_empty_scopes_are_null() -> None:
    acc = RepeatAccumulator(2)
    for row in ([0.5, 0.25], [1.0, 0.75]):
        unit = RowSamples()
        for value in row:
            unit.add(None, (value,))
        acc.add(unit.unit().scores[0])
    got = acc.fields(0.625, 0.95)
    assert "pass_at_k" not in got and got["within_row_variance"] == pytest.approx(np.mean([0.03125, 0.03125]))
    empty = RepeatAccumulator(2).fields(0.0, 0.95)
    assert empty["stderr"] is None and empty["within_row_variance"] is None and "pass_at_k" not in empty
