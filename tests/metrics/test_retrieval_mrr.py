"""retrieval-mrr (trec_eval recip_rank, and mrr_cut_k) on hand-worked queries; parity in test_retrieval_parity.py."""

from __future__ import annotations

from tests.metrics.retrieval_cases import QRELS, scores


def test_reciprocal_rank_over_the_whole_list_and_within_each_cut_off(build) -> None:  # type: ignore[no-untyped-def]
    out = scores(build, "retrieval-mrr", ["x", "y", "b"], QRELS)
    assert out == {"recip_rank": 1 / 3, "mrr_cut_1": 0.0, "mrr_cut_2": 0.0, "mrr_cut_5": 1 / 3, "nan_reason": ""}
    assert scores(build, "retrieval-mrr", ["x"], QRELS)["recip_rank"] == 0.0
