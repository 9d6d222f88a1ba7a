"""Rubric aggregation: label distribution in declaration order, mode ties, numeric statistics."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from beameval.stats.rubric import mode_category, rubric_result
from beameval.stats.summary import ScoreAccumulator

NAN = float("nan")
LEVELS = [("poor", 0, "bad answer"), ("fair", 0.5, None), ("good", 1, "great answer")]


def aggregate(pairs):
    acc = ScoreAccumulator()
    labels: Counter[str] = Counter()
    for value, label in pairs:
        acc.add(value)
        if label is not None:
            labels[label] += 1
    return rubric_result(acc.result("llm-judge.quality"), labels, LEVELS)


def test_rubric_result_shape_and_values() -> None:
    got = aggregate([(1, "good"), (0, "poor"), (1, "good"), (NAN, ""), (0.5, "fair")])
    assert list(got) == [
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
        "rubric_distribution",
        "mode_category",
    ]
    assert got["score_type"] == "rubric"
    assert got["count"] == 4 and got["nan_count"] == 1
    assert got["sum"] == 2.5 and got["mean"] == 0.625 and got["min"] == 0.0 and got["max"] == 1.0
    assert got["variance"] == pytest.approx(0.171875, rel=1e-15)
    assert got["rubric_distribution"] == [
        {"label": "poor", "description": "bad answer", "value": 0.0, "count": 1},
        {"label": "fair", "description": None, "value": 0.5, "count": 1},
        {"label": "good", "description": "great answer", "value": 1.0, "count": 2},
    ]
    assert got["mode_category"] == "good"
    json.dumps(got, allow_nan=False)


def test_mode_ties_go_to_smallest_label() -> None:
    assert aggregate([(1, "good"), (0, "poor")])["mode_category"] == "good"  # "good" < "poor"
    assert mode_category({"b": 2, "a": 2, "c": 1}) == "a"
    assert mode_category({}) is None


def test_mode_set_when_every_count_is_zero_and_all_nan() -> None:
    got = aggregate([(NAN, ""), (None, None)])
    assert got["mode_category"] == "fair"
    assert got["count"] == 0 and got["nan_count"] == 2
    assert got["sum"] is None and got["mean"] is None and got["variance"] is None
    assert [d["count"] for d in got["rubric_distribution"]] == [0, 0, 0]


def test_unknown_labels_are_left_out_of_the_distribution() -> None:
    got = aggregate([(1, "good"), (NAN, "excellent")])
    assert [d["count"] for d in got["rubric_distribution"]] == [0, 0, 1]
