"""retrieval-precision (trec_eval P_k) on a hand-worked query; parity in test_retrieval_parity.py."""

from __future__ import annotations

from tests.metrics.retrieval_cases import QRELS, RUN, scores


def test_precision_divides_by_k_even_past_the_end_of_the_list(build) -> None:  # type: ignore[no-untyped-def]
    assert scores(build, "retrieval-precision", RUN, QRELS) == {"P_1": 1.0, "P_2": 0.5, "P_5": 2 / 5, "nan_reason": ""}
