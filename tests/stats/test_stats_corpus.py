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
        "sample_variance": None,
        "sample_std_dev": None,
        "stderr": None,
        "ci_low": None,
        "ci_high": None,
        "ci_method": None,
        "confidence_level": 0.95,
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
        assert got["stderr"] is None and got["ci_method"] is None
        json.dumps(got, allow_nan=False)


def test_corpus_score_of_zero_or_one_gets_no_wilson_interval() -> None:
    """A corpus score is one number, not a mean of 0/1 rows: no interval even when it is 0 or 1."""
    for value in (0.0, 1.0):
        got = corpus_result("x.corpus", value, confidence_level=0.9)
        assert (got["ci_low"], got["ci_high"], got["ci_method"], got["confidence_level"]) == (None, None, None, 0.9)
