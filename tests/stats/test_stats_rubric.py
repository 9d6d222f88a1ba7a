"""Rubric aggregation: label distribution in declaration order, mode ties, numeric statistics."""

from __future__ import annotations

import json
import random

import pytest

from stats import rubric
from stats.rubric import RubricAccumulator, mode_category

NAN = float("nan")
LEVELS = [("poor", 0, "bad answer"), ("fair", 0.5, None), ("good", 1, "great answer")]
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
    "rubric_distribution",
    "mode_category",
]


def test_rubric_result_shape_and_values() -> None:
    acc = RubricAccumulator()
    for value, label in [(1, "good"), (0, "poor"), (1, "good"), (NAN, ""), (0.5, "fair")]:
        acc.add(value, label)
    got = acc.result("llm-judge.quality", LEVELS)
    assert list(got) == KEYS
    assert got["score_type"] == "rubric"
    assert got["count"] == 4 and got["nan_count"] == 1
    assert got["sum"] == 2.5 and got["mean"] == 0.625 and got["min"] == 0.0 and got["max"] == 1.0
    assert got["variance"] == pytest.approx(0.171875, rel=1e-15)
    assert got["std_dev"] == pytest.approx(0.171875**0.5, rel=1e-15)
    assert got["rubric_distribution"] == [
        {"label": "poor", "description": "bad answer", "value": 0.0, "count": 1},
        {"label": "fair", "description": None, "value": 0.5, "count": 1},
        {"label": "good", "description": "great answer", "value": 1.0, "count": 2},
    ]
    assert got["mode_category"] == "good"
    assert "percentiles" not in got and "histogram" not in got
    assert type(got["rubric_distribution"][0]["value"]) is float
    json.dumps(got, allow_nan=False)


def test_mode_ties_go_to_smallest_label() -> None:
    acc = RubricAccumulator()
    acc.add(1, "good")
    acc.add(0, "poor")
    assert acc.result("q", LEVELS)["mode_category"] == "good"  # "good" < "poor"
    assert mode_category({"b": 2, "a": 2, "c": 1}) == "a"
    assert mode_category({}) is None


def test_mode_set_when_every_count_is_zero_and_all_nan() -> None:
    acc = RubricAccumulator()
    acc.add(NAN, "")
    acc.add(None, None)
    got = acc.result("q", LEVELS)
    assert got["mode_category"] == "fair"
    assert got["count"] == 0 and got["nan_count"] == 2
    assert got["sum"] is None and got["mean"] is None and got["variance"] is None
    assert [d["count"] for d in got["rubric_distribution"]] == [0, 0, 0]


def test_unknown_labels_are_not_in_distribution_and_allowed_filter_bounds_memory() -> None:
    acc = RubricAccumulator(labels=[label for label, _, _ in LEVELS])
    acc.add(1, "good")
    acc.add(NAN, "bogus")
    assert acc.label_counts == {"good": 1}
    free = RubricAccumulator().add(NAN, "bogus")
    assert [d["count"] for d in free.result("q", LEVELS)["rubric_distribution"]] == [0, 0, 0]


@pytest.mark.parametrize("seed", range(5))
def test_partitioned_merge_equals_single_pass(seed) -> None:
    rng = random.Random(seed)
    rows = []
    for _ in range(500):
        label, value, _ = rng.choice([*LEVELS, ("", NAN, None)])
        rows.append((value, label))
    single = RubricAccumulator()
    for value, label in rows:
        single.add(value, label)
    want = json.dumps(single.result("q", LEVELS))
    parts = [RubricAccumulator() for _ in range(rng.randint(1, 20))]
    for value, label in rows:
        rng.choice(parts).add(value, label)
    rng.shuffle(parts)
    merged = rubric.merge(parts)
    assert merged is parts[0]
    assert json.dumps(rubric.result(merged, "q", LEVELS)) == want


def test_module_add_and_empty_merge() -> None:
    acc = rubric.add(RubricAccumulator(), 1.0, "good")
    assert acc.result("q", LEVELS)["count"] == 1
    assert rubric.merge([]).result("q", LEVELS)["count"] == 0
