"""retrieval-recall (trec_eval recall_k) on a hand-worked query; parity in test_retrieval_parity.py."""

from __future__ import annotations

from tests.metrics.retrieval_cases import QRELS, RUN, scores


def test_recall_counts_every_relevant_judgement(build) -> None:  # type: ignore[no-untyped-def]
    out = scores(build, "retrieval-recall", RUN, QRELS)
    assert (out["recall_1"], out["recall_2"], out["recall_5"]) == (1 / 3, 1 / 3, 2 / 3)
