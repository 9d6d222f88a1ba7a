"""Corpus scores: one value shaped like a range aggregate, or the all-NaN shape."""

from __future__ import annotations

import json

from beameval.stats.corpus import corpus_result

PCT_KEYS = [f"p{p}" for p in range(10, 101, 10)]


def test_corpus_value() -> None:
    got = corpus_result("bleu.corpus", 27.5)
    assert got == {
        "name": "bleu.corpus",
        "score_type": "range",
        "count": 1,
        "nan_count": 0,
        "sum": 27.5,
        "mean": 27.5,
        "min": 27.5,
        "max": 27.5,
        "std_dev": 0.0,
        "variance": 0.0,
        "percentiles": dict.fromkeys(PCT_KEYS, 27.5),
        "histogram": {"bins": [{"lower_bound": 27.5, "upper_bound": 27.5, "count": 1}]},
        "method": "exact",
    }
    json.dumps(got, allow_nan=False)


def test_corpus_int_value_becomes_float() -> None:
    got = corpus_result("x.corpus", 3)
    assert type(got["sum"]) is float and got["percentiles"]["p50"] == 3.0


def test_corpus_nan() -> None:
    for value in (float("nan"), None):
        got = corpus_result("bleu.corpus", value)
        assert got["count"] == 0 and got["nan_count"] == 1
        for key in ("sum", "mean", "min", "max", "std_dev", "variance", "percentiles"):
            assert got[key] is None
        assert got["histogram"] == {"bins": []} and got["method"] == "exact"
        json.dumps(got, allow_nan=False)
