"""rouge: the four F-measures equal direct rouge-score calls (target=reference)."""

from __future__ import annotations

import pytest
from rouge_score.rouge_scorer import RougeScorer

from beameval.core.errors import MetricError
from beameval.metrics.rouge import Rouge

OUTPUTS = ["rouge_1_score", "rouge_2_score", "rouge_3_score", "rouge_L_score"]
KEYS = ["rouge1", "rouge2", "rouge3", "rougeL"]


@pytest.fixture(scope="module")
def scorer() -> RougeScorer:
    return RougeScorer(KEYS, use_stemmer=True)


def test_outputs(build) -> None:
    assert build("rouge", reference="x").output_names() == OUTPUTS


def test_matches_rouge_score(build, row, corpus, scorer) -> None:
    metric = build("rouge", reference="{{ item.reference }}", candidate="{{ item.candidate }}")
    for candidate, references in corpus:
        for reference in references:
            result = metric.score(row({"candidate": candidate, "reference": reference}))
            direct = scorer.score(reference, candidate)
            assert result == {name: direct[key].fmeasure for name, key in zip(OUTPUTS, KEYS, strict=True)}


def test_stemmed_partial_overlap(build, row, scorer) -> None:
    # "cats" stems to "cat"; "ran" does not stem to "run": P = 1/3, R = 1/4
    metric = build("rouge", reference="{{ item.reference }}")
    result = metric.score(row({"reference": "the cats are running"}, output_text="a cat ran"))
    direct = scorer.score("the cats are running", "a cat ran")
    assert result["rouge_1_score"] == direct["rouge1"].fmeasure == 2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4)
    assert result["rouge_2_score"] == 0.0


def test_exact_values(build, row) -> None:
    metric = build("rouge", reference="{{ item.reference }}")
    same = metric.score(row({"reference": "The quick brown fox."}, output_text="the quick brown fox"))
    assert same == dict.fromkeys(OUTPUTS, 1.0)
    disjoint = metric.score(row({"reference": "alpha beta"}, output_text="gamma delta"))
    assert disjoint == dict.fromkeys(OUTPUTS, 0.0)
    # stemming: "running" and "runs" both stem to "run"
    stemmed = metric.score(row({"reference": "he runs"}, output_text="he running"))
    assert stemmed["rouge_1_score"] == 1.0


def test_empty_texts_score_zero(build, row) -> None:
    metric = build("rouge", reference="{{ item.reference }}", candidate="{{ item.candidate }}")
    for candidate, reference in [("", ""), ("", "x"), ("x", ""), ("!!!", "???")]:
        result = metric.score(row({"reference": reference, "candidate": candidate}))
        assert result == dict.fromkeys(OUTPUTS, 0.0)
        assert all(type(value) is float for value in result.values())


def test_unicode_and_numbers(build, row, scorer) -> None:
    metric = build("rouge", reference="{{ item.reference }}")
    # rouge-score's tokeniser keeps only [a-z0-9], so accented letters split words
    result = metric.score(row({"reference": "café 2024"}, output_text="cafe 2024"))
    direct = scorer.score("café 2024", "cafe 2024")
    assert result == {name: direct[key].fmeasure for name, key in zip(OUTPUTS, KEYS, strict=True)}
    assert metric.score(row({"reference": 42}, output_text="42"))["rouge_1_score"] == 1.0


def test_scorer_is_built_once(build, row, monkeypatch) -> None:
    metric = build("rouge", reference="x")
    assert isinstance(metric, Rouge)
    scorer_before = metric._scorer

    def fail(*args, **kwargs):
        raise AssertionError("RougeScorer built per row")

    monkeypatch.setattr("rouge_score.rouge_scorer.RougeScorer", fail)
    metric.score(row({}, output_text="x"))
    assert metric._scorer is scorer_before


def test_missing_candidate(build, row) -> None:
    metric = build("rouge", reference="x")
    with pytest.raises(MetricError, match="metric 'rouge' has no candidate"):
        metric.score(row({}, output_text=None))
