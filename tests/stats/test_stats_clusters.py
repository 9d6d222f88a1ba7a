"""CR1 clustered standard errors: the formula against a sandwich estimator, and merge-order independence."""

from __future__ import annotations

import math
import pickle
import random

import numpy as np
import pytest
from scipy import stats as sps

from beameval.stats.clusters import ClusterAccumulator, ClusterSums, ScopedClusterSums, clustered_fields, cr1_stderr
from beameval.stats.moments import ExactSum

SEEDS = range(25)


def sandwich_stderr(values: list[float], clusters: list[object]) -> float:
    """Liang-Zeger CR1 for the intercept-only regression y = b + u, with matrices.

    V = (X'X)^-1 (Σ_c X_c' u_c u_c' X_c) (X'X)^-1 · C/(C−1); X is a column of ones.
    """
    y = np.asarray(values, dtype=float)
    x = np.ones((len(y), 1))
    bread = np.linalg.inv(x.T @ x)
    u = y - (bread @ x.T @ y)[0]
    labels = sorted(set(clusters), key=repr)
    meat = np.zeros((1, 1))
    for label in labels:
        rows = [i for i, c in enumerate(clusters) if c == label]
        score = x[rows].T @ u[rows]
        meat += np.outer(score, score)
    c = len(labels)
    return float(math.sqrt((bread @ meat @ bread)[0, 0] * c / (c - 1)))


def grouped_data(rng: random.Random, n_clusters: int, binary: bool) -> tuple[list[float], list[int]]:
    values, labels = [], []
    for cluster in range(n_clusters):
        size = rng.randint(1, 8)
        p = rng.random()
        for _ in range(size):
            values.append(float(rng.random() < p) if binary else rng.gauss(p, 0.3))
            labels.append(cluster)
    order = list(range(len(values)))
    rng.shuffle(order)
    return [values[i] for i in order], [labels[i] for i in order]


def two_stage(values: list[float], labels: list[int], rng: random.Random, max_exact_pairs: int = 100_000):
    """Both pipeline stages with random partitions and merge orders at each."""
    per_cluster: dict[int, list[ClusterSums]] = {}
    for value, label in zip(values, labels, strict=True):
        parts = per_cluster.setdefault(label, [ClusterSums(1) for _ in range(rng.randint(1, 3))])
        rng.choice(parts).add((value,))
    sums = []
    for parts in per_cluster.values():
        rng.shuffle(parts)
        first = parts[0]
        for other in parts[1:]:
            first.merge_from(other)
        sums.append(first)
    rng.shuffle(sums)
    accs = [ClusterAccumulator(max_exact_pairs) for _ in range(rng.randint(1, 5))]
    for cluster in sums:
        rng.choice(accs).add(cluster.counts[0], cluster.total(0), cluster.infinite[0])
    accs = [pickle.loads(pickle.dumps(acc)) for acc in accs]  # what a runner does between stages
    rng.shuffle(accs)
    merged = accs[0]
    for acc in accs[1:]:
        merged.merge_from(acc)
    return merged.totals()


@pytest.mark.parametrize("binary", [True, False])
def test_cr1_matches_the_sandwich_estimator(binary: bool) -> None:
    rng = random.Random(11)
    values, labels = grouped_data(rng, 40, binary)
    totals = two_stage(values, labels, rng)
    assert totals is not None
    assert totals.clusters == 40 and totals.n == len(values)
    assert totals.mean == pytest.approx(np.mean(values), rel=1e-13)
    got = cr1_stderr(totals.clusters, totals.n, totals.residual_ss)
    assert got == pytest.approx(sandwich_stderr(values, labels), rel=1e-11)


def test_singleton_clusters_give_the_naive_standard_error() -> None:
    values = [0.1, 0.9, 0.4, 0.4, 0.7, 0.2]
    totals = two_stage(values, list(range(len(values))), random.Random(0))
    assert totals is not None
    assert cr1_stderr(totals.clusters, totals.n, totals.residual_ss) == pytest.approx(sps.sem(values), rel=1e-12)


def test_clustered_fields_use_c_minus_one_degrees_of_freedom() -> None:
    rng = random.Random(5)
    values, labels = grouped_data(rng, 12, True)
    totals = two_stage(values, labels, rng)
    assert totals is not None
    mean = float(np.mean(values))
    got = clustered_fields(mean, totals, 0.9)
    se = sandwich_stderr(values, labels)
    half = sps.t.ppf(0.95, 11) * se
    assert got["ci_method"] == "clustered-t"
    assert got["stderr"] == pytest.approx(se, rel=1e-11)
    assert (got["ci_low"], got["ci_high"]) == pytest.approx((mean - half, mean + half), rel=1e-11)
    one_cluster = two_stage([1.0, 0.0, 1.0], [7, 7, 7], rng)
    assert clustered_fields(2 / 3, one_cluster, 0.95) == dict.fromkeys(["stderr", "ci_low", "ci_high", "ci_method"])


@pytest.mark.parametrize("seed", SEEDS)
def test_any_partition_and_order_gives_the_single_pass_result(seed: int) -> None:
    """Property: random data, random partitions at both stages, random merge orders."""
    rng = random.Random(seed)
    binary = seed % 2 == 0
    values, labels = grouped_data(rng, rng.randint(2, 60), binary)
    # The single pass: one accumulator per cluster in label order, one scope accumulator.
    single = ClusterAccumulator()
    for label in sorted(set(labels)):
        sums = ClusterSums(1)
        for value, other in zip(values, labels, strict=True):
            if other == label:
                sums.add((value,))
        single.add(sums.counts[0], sums.total(0))
    want = single.totals()
    exact = two_stage(values, labels, random.Random(seed + 1000))
    assert exact == want  # the exact pair map: bit for bit
    moments = two_stage(values, labels, random.Random(seed + 2000), max_exact_pairs=3)
    assert moments is not None and want is not None
    assert moments.clusters == want.clusters and moments.n == want.n
    assert moments.mean == pytest.approx(want.mean, rel=1e-12, abs=1e-15)
    assert moments.residual_ss == pytest.approx(want.residual_ss, rel=1e-12, abs=1e-12)


def test_nan_values_and_empty_clusters_are_skipped_and_infinity_disables() -> None:
    sums = ClusterSums(2).add((1.0, math.nan)).add((0.0, math.nan))
    acc = ClusterAccumulator().add(sums.counts[0], sums.total(0)).add(sums.counts[1], sums.total(1))
    totals = acc.totals()
    assert totals is not None and (totals.clusters, totals.n) == (1, 2)
    assert ClusterAccumulator().totals() is None
    infinite = ClusterSums(1).add((math.inf,))
    assert infinite.infinite == [True] and infinite.counts == [0]
    assert ClusterAccumulator().add(2, 1.0).add(0, 0.0, infinite=True).totals() is None


def test_exact_sum_is_order_independent_and_correctly_rounded() -> None:
    rng = random.Random(2)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(-8, 8) for _ in range(500)]
    parts = [ExactSum() for _ in range(7)]
    for value in values:
        rng.choice(parts).add(value)
    rng.shuffle(parts)
    for other in parts[1:]:
        parts[0].merge(other)
    assert parts[0].value == math.fsum(values)


@pytest.mark.parametrize("seed", SEEDS)
def test_scoped_sums_split_any_way_equal_one_sum_per_scope_and_cluster(seed: int) -> None:
    """Keyed by the cluster alone, each scope's sums are those of the rows of that scope and cluster."""
    rng = random.Random(seed)
    rows = [
        (rng.randrange(6), ("overall", f"g:{rng.randrange(4)}"), (float(rng.random() < 0.6), rng.gauss(0, 1)))
        for _ in range(300)
    ]
    by_cluster: dict[int, list[ScopedClusterSums]] = {}
    for cluster, scopes, values in rows:
        parts = by_cluster.setdefault(cluster, [ScopedClusterSums(2) for _ in range(rng.randint(1, 3))])
        rng.choice(parts).add(scopes, values)
    for cluster, parts in by_cluster.items():
        parts = [pickle.loads(pickle.dumps(part)) for part in parts]
        rng.shuffle(parts)
        merged = parts[0]
        for other in parts[1:]:
            merged.merge_from(other)
        expected_scopes = {scope for c, scopes, _ in rows if c == cluster for scope in scopes}
        assert set(merged.by_scope) == expected_scopes
        for scope, sums in merged.by_scope.items():
            mine = [values for c, scopes, values in rows if c == cluster and scope in scopes]
            assert sums.counts == [len(mine), len(mine)]
            assert sums.total(0) == sum(values[0] for values in mine)  # 0/1 scores: exact in any order
            assert sums.total(1) == math.fsum(values[1] for values in mine)
