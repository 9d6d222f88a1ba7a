"""The retrieval metrics: hand-computed values, accepted shapes of the ranked list, row errors, config checks."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from beameval.core.errors import MetricError
from beameval.metrics.retrieval_measures import parse_relevant, ranked_ids
from tests.metrics.retrieval_cases import scores


def test_ties_rank_by_document_id_descending_and_duplicates_keep_the_first() -> None:
    run = [{"id": "a", "score": 1}, {"id": "c", "score": 1}, {"id": "b", "score": 2}, {"id": "a", "score": 9}]
    assert ranked_ids(run) == ["b", "c", "a"]  # a's second entry (score 9) is ignored
    assert ranked_ids({"a": 1.0, "b": 1.0}) == ["b", "a"]
    assert ranked_ids(["z", "a", "z", 7]) == ["z", "a", "7"]  # no scores: the list's order
    assert ranked_ids('[{"id": "a", "score": 0.5}]') == ["a"]  # JSON text (a CSV cell)


def test_no_relevant_document_is_nan_with_a_reason_and_an_empty_list_scores_zero(build) -> None:  # type: ignore[no-untyped-def]
    out = scores(build, "retrieval-ndcg", ["a"], {"a": 0})
    assert all(math.isnan(out[name]) for name in ("ndcg_cut_1", "ndcg_cut_2", "ndcg_cut_5"))
    assert out["nan_reason"] == "no relevant documents"
    assert scores(build, "retrieval-recall", [], {"a": 1}) == {
        "recall_1": 0.0,
        "recall_2": 0.0,
        "recall_5": 0.0,
        "nan_reason": "",
    }


def test_relevant_as_a_list_means_grade_one() -> None:
    assert parse_relevant(["a", 3]) == {"a": 1, "3": 1}
    assert parse_relevant({"a": 2.0, 5: 0}) == {"a": 2, "5": 0}


@pytest.mark.parametrize(
    ("retrieved", "relevant", "message"),
    [
        ("not json", {"a": 1}, "'retrieved' rendered text that is not JSON"),
        (42, {"a": 1}, "'retrieved' must be a list"),
        ([{"score": 1}], {"a": 1}, "entry 0 has no 'id'"),
        ([{"id": "a", "score": 1}, {"id": "b"}], {"a": 1}, "mixes entries with and without a score"),
        ([{"id": "a", "score": float("nan")}], {"a": 1}, "must be a finite number"),
        ([{"id": ["a"], "score": 1}], {"a": 1}, "document id must be a string or an integer"),
        (["a"], {"a": 1.5}, "grade of document 'a' must be an integer"),
        (["a"], {"a": "high"}, "grade of document 'a' must be an integer"),
        (["a"], 3, "'relevant' must be a mapping"),
    ],
)
def test_bad_values_fail_the_row_with_a_message(build, retrieved, relevant, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MetricError, match=message):
        scores(build, "retrieval-map", retrieved, relevant)


def test_config_defaults_and_checks(build) -> None:  # type: ignore[no-untyped-def]
    metric = build("retrieval-mrr")
    assert metric.output_names() == ["recip_rank", "mrr_cut_1", "mrr_cut_5", "mrr_cut_10", "mrr_cut_100"]
    assert metric.label_outputs == ("nan_reason",)
    assert metric.output_ranges()["recip_rank"] == (0.0, 1.0)
    with pytest.raises(ValidationError, match="distinct"):
        build("retrieval-ndcg", k=[5, 5])
    with pytest.raises(ValidationError):
        build("retrieval-ndcg", k=[0])
    with pytest.raises(ValidationError):
        build("retrieval-ndcg", k=[])
