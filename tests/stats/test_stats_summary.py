"""Exact-mode range statistics: the reference's semantics, edge cases and partition-independence."""

from __future__ import annotations

import copy
import json
import math
import pickle
import random

import numpy as np
import pytest

from beameval.stats import summary
from beameval.stats.summary import MAX_EXACT_DISTINCT, ScoreAccumulator

NAN = float("nan")
KEYS = [
    "name",
    "score_type",
    "count",
    "nan_count",
    "sum",
    "mean",
    "min",
    "max",
    "std_dev",
    "variance",
    "sample_variance",
    "sample_std_dev",
    "stderr",
    "ci_low",
    "ci_high",
    "ci_method",
    "confidence_level",
    "percentiles",
    "histogram",
    "method",
]
PCT_KEYS = [f"p{p}" for p in range(10, 101, 10)]


def run(values, name="s.x", **kwargs) -> dict:
    return ScoreAccumulator(**kwargs).add_all(values).result(name)


def canonical(result: dict) -> str:
    """JSON text, so 0.0 vs -0.0 and int vs float differences are visible."""
    return json.dumps(result, allow_nan=False)


def assert_matches_reference(values, reference) -> None:
    got = run(values)
    want = reference.stats(values)
    assert list(got) == KEYS
    assert got["count"] == want["count"]
    assert got["nan_count"] == want["nan_count"]
    assert got["method"] == "exact"
    assert got["min"] == want["min"]
    assert got["max"] == want["max"]
    assert got["sum"] == pytest.approx(want["sum"], rel=1e-12, abs=1e-12)
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-12, abs=1e-12)
    assert got["variance"] == pytest.approx(want["variance"], rel=1e-9, abs=1e-12)
    assert got["std_dev"] == pytest.approx(want["std_dev"], rel=1e-9, abs=1e-12)
    assert got["percentiles"] == want["percentiles"]
    bins = [(b["lower_bound"], b["upper_bound"], b["count"]) for b in got["histogram"]["bins"]]
    assert bins == want["histogram"]
    assert sum(b[2] for b in bins) == got["count"]


# ---------------------------------------------------------------- reference semantics


def test_reference_example_0_1_1() -> None:
    got = run([0, 1, 1])
    assert got["percentiles"]["p30"] == 0.2
    assert got["percentiles"]["p40"] == 0.6
    assert got["percentiles"]["p50"] == 1.0
    assert got["percentiles"]["p10"] == 0.0
    assert got["percentiles"]["p100"] == 1.0
    assert got["count"] == 3 and got["sum"] == 2.0 and got["min"] == 0.0 and got["max"] == 1.0
    assert got["variance"] == pytest.approx(2 / 9, rel=1e-15)
    assert got["std_dev"] == pytest.approx(math.sqrt(2 / 9), rel=1e-15)


def test_histogram_bounds_are_raw_floats() -> None:
    bins = run([0.0, 1.0])["histogram"]["bins"]
    assert len(bins) == 10
    assert bins[3]["lower_bound"] == 0.30000000000000004
    assert bins[2]["upper_bound"] == 0.30000000000000004
    assert bins[-1]["upper_bound"] == 1.0
    assert [b["count"] for b in bins] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]


def test_histogram_value_on_inner_edge_goes_up_last_bin_closed() -> None:
    bins = run([0.0, 0.5, 1.0, 1.0])["histogram"]["bins"]
    assert bins[5]["lower_bound"] == 0.5
    assert [b["count"] for b in bins] == [1, 0, 0, 0, 0, 1, 0, 0, 0, 2]


def test_all_nan() -> None:
    got = run([NAN, NAN, None])
    assert got == {
        "name": "s.x",
        "score_type": "range",
        "count": 0,
        "nan_count": 3,
        "sum": None,
        "mean": None,
        "min": None,
        "max": None,
        "std_dev": None,
        "variance": None,
        "sample_variance": None,
        "sample_std_dev": None,
        "stderr": None,
        "ci_low": None,
        "ci_high": None,
        "ci_method": None,
        "confidence_level": 0.95,
        "percentiles": None,
        "histogram": {"bins": []},
        "method": "exact",
    }
    assert list(got) == KEYS


def test_empty() -> None:
    got = run([])
    assert got["count"] == 0 and got["nan_count"] == 0 and got["percentiles"] is None
    assert got["histogram"] == {"bins": []}


def test_one_value() -> None:
    got = run([0.7])
    assert got["count"] == 1 and got["sum"] == 0.7 and got["mean"] == 0.7
    assert got["min"] == got["max"] == 0.7
    assert got["variance"] == 0.0 and got["std_dev"] == 0.0
    assert got["percentiles"] == dict.fromkeys(PCT_KEYS, 0.7)
    assert got["histogram"] == {"bins": [{"lower_bound": 0.7, "upper_bound": 0.7, "count": 1}]}


def test_identical_values_single_bin() -> None:
    got = run([3] * 50 + [NAN] * 5)
    assert got["count"] == 50 and got["nan_count"] == 5
    assert got["histogram"] == {"bins": [{"lower_bound": 3.0, "upper_bound": 3.0, "count": 50}]}
    assert got["percentiles"] == dict.fromkeys(PCT_KEYS, 3.0)
    assert got["variance"] == 0.0 and got["sum"] == 150.0


def test_negative_values(reference) -> None:
    values = [-5.5, -1.0, -1.0, -0.25, -3.0, -10.0]
    assert_matches_reference(values, reference)
    got = run(values)
    assert got["min"] == -10.0 and got["max"] == -0.25


def test_mixed_with_nan(reference) -> None:
    values = [0.1, NAN, 0.9, 0.5, NAN, -0.3, 0.5]
    assert_matches_reference(values, reference)
    assert run(values)["nan_count"] == 2


def test_negative_zero_folds_into_zero() -> None:
    assert canonical(run([-0.0, 0.0, 1.0])) == canonical(run([0.0, -0.0, 1.0]))
    assert run([-0.0])["min"] == 0.0 and math.copysign(1, run([-0.0])["min"]) == 1.0


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 10, 11, 99, 1000, 5000])
@pytest.mark.parametrize("kind", ["uniform", "ties", "gauss", "with_nan"])
def test_matches_reference_on_random_data(size, kind, reference) -> None:
    rng = random.Random(f"{size}-{kind}")
    if kind == "uniform":
        values = [rng.uniform(-1, 1) for _ in range(size)]
    elif kind == "ties":
        values = [rng.randint(0, 5) / 4 for _ in range(size)]
    elif kind == "gauss":
        values = [rng.gauss(-3, 100) for _ in range(size)]
    else:
        values = [NAN if rng.random() < 0.2 else rng.uniform(0, 10) for _ in range(size)]
    assert_matches_reference(values, reference)


# ---------------------------------------------------------------- types and serialisation


def test_plain_floats_from_numpy_and_bool_inputs() -> None:
    got = run([np.float32(0.5), np.float64(0.25), np.int64(1), True, False, 1, np.nan])
    assert got["count"] == 6 and got["nan_count"] == 1

    def walk(node):
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        else:
            assert node is None or type(node) in (str, int, float), type(node)

    walk(got)
    for key in ("sum", "mean", "min", "max", "std_dev", "variance"):
        assert type(got[key]) is float
    json.dumps(got, allow_nan=False)


def test_ints_are_reported_as_floats() -> None:
    got = run([1, 0, 1])
    assert type(got["min"]) is float and type(got["max"]) is float and type(got["sum"]) is float
    assert all(type(v) is float for v in got["percentiles"].values())
    assert all(type(b["lower_bound"]) is float for b in got["histogram"]["bins"])


def test_infinities_never_give_nan() -> None:
    got = run([1.0, math.inf, 2.0])
    assert got["max"] == math.inf and got["sum"] == math.inf and got["variance"] is None
    assert got["percentiles"]["p100"] == math.inf
    both = run([-math.inf, math.inf, 0.0])
    assert both["sum"] is None and both["mean"] is None and both["count"] == 3
    assert "NaN" not in json.dumps(got) and "NaN" not in json.dumps(both)


def test_pickle_and_deepcopy_round_trip() -> None:
    acc = ScoreAccumulator().add_all([0.1, 0.2, NAN, 0.2])
    assert canonical(pickle.loads(pickle.dumps(acc)).result("a")) == canonical(acc.result("a"))
    assert canonical(copy.deepcopy(acc).result("a")) == canonical(acc.result("a"))


def test_module_functions() -> None:
    acc = summary.add(ScoreAccumulator(), 1.0)
    merged = summary.merge([acc, ScoreAccumulator().add(0.0)])
    assert merged is acc
    assert summary.result(merged, "m")["count"] == 2
    assert summary.merge([]).result("e")["count"] == 0


# ---------------------------------------------------------------- determinism under merging


def partition_results(values, rng, n_parts, **kwargs) -> dict:
    parts: list[list] = [[] for _ in range(n_parts)]
    for v in values:
        parts[rng.randrange(n_parts)].append(v)
    accs = []
    for part in parts:
        rng.shuffle(part)
        accs.append(ScoreAccumulator(**kwargs).add_all(part))
    rng.shuffle(accs)
    while len(accs) > 1:  # random merge tree, random group sizes
        k = rng.randint(2, len(accs))
        group = [accs.pop(rng.randrange(len(accs))) for _ in range(k)]
        accs.append(summary.merge(group))
    return accs[0].result("s.x")


@pytest.mark.parametrize("seed", range(12))
def test_partitioned_merge_equals_single_pass_exactly(seed) -> None:
    rng = random.Random(seed)
    size = rng.choice([1, 5, 200, 3000])
    values = [
        rng.choice([NAN, -0.0, 0.0, 1.0, rng.uniform(-1e6, 1e6), rng.random() * 1e-9, rng.randint(-3, 3)])
        for _ in range(size)
    ]
    single = canonical(run(values))
    for _ in range(5):
        assert canonical(partition_results(values, rng, rng.randint(1, 20))) == single


def test_merge_leaves_other_unchanged() -> None:
    a = ScoreAccumulator().add_all([1.0, 2.0])
    b = ScoreAccumulator().add_all([2.0, 3.0, NAN])
    before = canonical(b.result("b"))
    a.merge_from(b)
    assert canonical(b.result("b")) == before
    assert a.result("a")["count"] == 4 and a.result("a")["nan_count"] == 1


def test_two_valued_score_stays_exact_at_any_size() -> None:
    acc = ScoreAccumulator().add_all([0, 1] * 200_000)
    assert acc.method == "exact" and len(acc.counts) == 2
    assert acc.result("x")["percentiles"]["p50"] == 0.5
    assert MAX_EXACT_DISTINCT == 100_000
