"""retrieval-ndcg (trec_eval ndcg_cut_k) on a hand-worked query; parity in test_retrieval_parity.py."""

from __future__ import annotations

import math

import pytest

from tests.metrics.retrieval_cases import QRELS, RUN, scores


def test_ndcg_gains_are_grades_over_the_ideal_ranking(build) -> None:  # type: ignore[no-untyped-def]
    out = scores(build, "retrieval-ndcg", RUN, QRELS)
    assert out["ndcg_cut_1"] == pytest.approx(1.0)  # grade 2 first, as in the ideal ranking
    assert out["ndcg_cut_2"] == pytest.approx(2 / (2 + 1 / math.log2(3)))
    assert out["ndcg_cut_5"] == pytest.approx((2 + 1 / 2) / (2 + 1 / math.log2(3) + 1 / 2))


def test_negative_grades_gain_nothing(build) -> None:  # type: ignore[no-untyped-def]
    out = scores(build, "retrieval-ndcg", ["bad", "a"], {"bad": -3, "a": 1}, k=(2,))
    assert out["ndcg_cut_2"] == pytest.approx((1 / math.log2(3)) / 1.0)
