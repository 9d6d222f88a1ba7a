"""Sketch mode: bounded memory past 100k distinct values, with the documented error bounds."""

from __future__ import annotations

import copy
import json
import math
import pickle
import random
from fractions import Fraction

import pytest

from beameval.stats import summary
from beameval.stats.sketch import DEFAULT_ALPHA, DEFAULT_MAX_BUCKETS, DDSketch
from beameval.stats.summary import ScoreAccumulator

ALPHA = DEFAULT_ALPHA
N_DISTINCT = 300_000


def close_to(estimate: float, exact: float, alpha: float = ALPHA) -> bool:
    return abs(estimate - exact) <= alpha * abs(exact) * (1 + 1e-9) + 1e-300


@pytest.fixture(scope="module")
def big_values() -> list[float]:
    rng = random.Random(20240601)
    values = [rng.uniform(-50.0, 150.0) for _ in range(N_DISTINCT)]
    assert len(set(values)) == N_DISTINCT
    return values


@pytest.fixture(scope="module")
def big_single(big_values) -> tuple[ScoreAccumulator, dict]:
    acc = ScoreAccumulator().add_all(big_values)
    return acc, acc.result("s.big")


def test_switches_to_sketch_with_bounded_buckets(big_single) -> None:
    acc, got = big_single
    assert acc.method == "ddsketch" and got["method"] == "ddsketch"
    assert acc.counts is None
    assert acc.sketch.num_buckets <= DEFAULT_MAX_BUCKETS
    assert len(acc._buffer) < summary.SKETCH_BATCH
    assert acc.sketch.count == N_DISTINCT


def test_exact_fields_in_sketch_mode(big_values, big_single, reference) -> None:
    _, got = big_single
    ordered = sorted(big_values)
    assert got["count"] == N_DISTINCT and got["nan_count"] == 0
    assert got["min"] == ordered[0] and got["max"] == ordered[-1]
    assert got["percentiles"]["p100"] == ordered[-1]
    mean = math.fsum(big_values) / N_DISTINCT
    variance = math.fsum((v - mean) ** 2 for v in big_values) / N_DISTINCT
    assert got["sum"] == pytest.approx(math.fsum(big_values), rel=1e-12)
    assert got["mean"] == pytest.approx(mean, rel=1e-9)
    assert got["variance"] == pytest.approx(variance, rel=1e-9)
    assert got["std_dev"] == pytest.approx(math.sqrt(variance), rel=1e-9)


def test_percentiles_within_alpha(big_values, big_single, reference) -> None:
    _, got = big_single
    ordered = sorted(big_values)
    for p in range(10, 100, 10):
        exact = reference.percentile(ordered, p)
        assert close_to(got["percentiles"][f"p{p}"], exact), (p, got["percentiles"][f"p{p}"], exact)


def test_histogram_within_alpha_of_edges(big_values, big_single, reference) -> None:
    _, got = big_single
    ordered = sorted(big_values)
    exact_bins = reference.histogram(ordered)
    bins = got["histogram"]["bins"]
    assert [(b["lower_bound"], b["upper_bound"]) for b in bins] == [(lo, hi) for lo, hi, _ in exact_bins]
    assert sum(b["count"] for b in bins) == N_DISTINCT
    for b, (lo, hi, exact_count) in zip(bins, exact_bins, strict=True):
        near_edges = sum(1 for v in big_values if abs(v - lo) <= ALPHA * abs(v) or abs(v - hi) <= ALPHA * abs(v))
        assert abs(b["count"] - exact_count) <= near_edges


@pytest.mark.parametrize("seed", range(3))
def test_partitioned_merge_matches_single_pass(big_values, big_single, seed) -> None:
    _, single = big_single
    rng = random.Random(seed)
    n_parts = rng.randint(2, 8)
    parts: list[list[float]] = [[] for _ in range(n_parts)]
    for v in big_values:
        parts[rng.randrange(n_parts)].append(v)
    accs = [ScoreAccumulator().add_all(part) for part in parts]  # most stay exact, merging crosses 100k
    rng.shuffle(accs)
    got = summary.merge(accs).result("s.big")
    assert got["method"] == "ddsketch"
    for key in ("count", "nan_count", "min", "max", "percentiles", "histogram"):
        assert got[key] == single[key], key  # same buckets whatever the partitioning
    for key in ("sum", "mean", "variance", "std_dev"):
        assert got[key] == pytest.approx(single[key], rel=1e-12), key


def test_merge_of_sketch_partitions_in_random_order() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(0, 2) * rng.choice([-1, 1]) for _ in range(20_000)] + [0.0] * 50
    single = ScoreAccumulator(max_exact_distinct=100).add_all(values).result("x")
    rng.shuffle(values)
    parts = [values[i::13] for i in range(13)]
    accs = [ScoreAccumulator(max_exact_distinct=100).add_all(p) for p in parts]
    rng.shuffle(accs)
    got = summary.merge(accs).result("x")
    assert got["method"] == "ddsketch"
    for key in ("count", "min", "max", "percentiles", "histogram"):
        assert got[key] == single[key], key
    for key in ("sum", "mean", "variance"):
        assert got[key] == pytest.approx(single[key], rel=1e-10), key
    ordered = sorted(values)
    for p in range(10, 100, 10):
        r = Fraction(p, 100) * (len(ordered) + 1) - 1
        lo = math.floor(r)
        a, b = ordered[lo], ordered[lo + 1]
        bound = ALPHA * max(abs(a), abs(b)) * (1 + 1e-9)
        assert abs(got["percentiles"][f"p{p}"] - (a + (b - a) * float(r - lo))) <= bound


@pytest.mark.parametrize("sketch_first", [True, False])
def test_exact_plus_sketch_merge(sketch_first) -> None:
    rng = random.Random(3)
    sketch_values = [rng.uniform(0, 10) for _ in range(5000)]
    exact_values = [0.0, 1.0, 1.0, float("nan"), 12.5]
    sketchy = ScoreAccumulator(max_exact_distinct=1000).add_all(sketch_values)
    exact = ScoreAccumulator(max_exact_distinct=1000).add_all(exact_values)
    assert sketchy.method == "ddsketch" and exact.method == "exact"
    exact_before = json.dumps(exact.result("e"))
    sketch_before = json.dumps(sketchy.result("s"))
    pair = [sketchy, exact] if sketch_first else [exact, sketchy]
    got = summary.merge(pair).result("m")
    single = ScoreAccumulator(max_exact_distinct=1000).add_all(sketch_values + exact_values).result("m")
    assert got["method"] == "ddsketch"
    assert got["count"] == 5004 and got["nan_count"] == 1
    assert got["min"] == 0.0 and got["max"] == 12.5
    for key in ("count", "nan_count", "min", "max", "percentiles", "histogram"):
        assert got[key] == single[key], key
    assert got["mean"] == pytest.approx(single["mean"], rel=1e-12)
    assert got["variance"] == pytest.approx(single["variance"], rel=1e-12)
    unchanged = pair[1]
    assert json.dumps(unchanged.result("e" if unchanged is exact else "s")) == (
        exact_before if unchanged is exact else sketch_before
    )


def test_bucket_cap_collapses_lowest_magnitudes(reference) -> None:
    rng = random.Random(11)
    values = [10 ** rng.uniform(0, 2) for _ in range(50_000)]  # ~460 buckets at alpha 0.005
    acc = ScoreAccumulator(max_exact_distinct=1000, max_buckets=256).add_all(values)
    got = acc.result("x")
    assert acc.sketch.num_buckets <= 256
    assert got["count"] == 50_000
    assert sum(b["count"] for b in got["histogram"]["bins"]) == 50_000
    ordered = sorted(values)
    for p in range(50, 100, 10):  # the upper half lies in uncollapsed buckets
        assert close_to(got["percentiles"][f"p{p}"], reference.percentile(ordered, p))


def test_sketch_handles_zero_negative_and_infinite_values() -> None:
    values = [0.0] * 10 + [-3.0, -2.0, 5.0, math.inf, -math.inf] + [float(i) for i in range(200)]
    got = ScoreAccumulator(max_exact_distinct=20).add_all(values + [float("nan")]).result("x")
    assert got["method"] == "ddsketch"
    assert got["count"] == len(values) and got["nan_count"] == 1
    assert got["min"] == -math.inf and got["max"] == math.inf
    assert got["sum"] is None and got["variance"] is None
    assert "NaN" not in json.dumps(got)


def test_ddsketch_relative_accuracy_per_value() -> None:
    rng = random.Random(5)
    sketch = DDSketch()
    for _ in range(20_000):
        value = rng.choice([-1, 1]) * 10 ** rng.uniform(-300, 300)
        single = DDSketch()
        single.add(value)
        ((estimate, count),) = single.weighted_values()
        assert count == 1 and close_to(estimate, value)
        sketch.add(value)
    huge = DDSketch()
    huge.add(1.7976931348623157e308)
    assert close_to(huge.weighted_values()[0][0], 1.7976931348623157e308)
    sketch.compact()
    assert sketch.num_buckets <= DEFAULT_MAX_BUCKETS and sketch.count == 20_000


def test_ddsketch_merge_requires_same_alpha() -> None:
    with pytest.raises(ValueError, match="alpha"):
        DDSketch(0.01).merge(DDSketch(0.005))


def test_sketch_accumulator_pickles() -> None:
    acc = ScoreAccumulator(max_exact_distinct=10).add_all([i / 7 for i in range(100)])
    assert acc.method == "ddsketch"
    want = json.dumps(acc.result("x"))
    assert json.dumps(pickle.loads(pickle.dumps(acc)).result("x")) == want
    assert json.dumps(copy.deepcopy(acc).result("x")) == want
