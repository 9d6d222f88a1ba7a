"""retrieval-map (trec_eval map_cut_k) on a hand-worked query; parity in test_retrieval_parity.py."""

from __future__ import annotations

import pytest

from tests.metrics.retrieval_cases import QRELS, RUN, scores


def test_average_precision_divides_by_every_relevant_judgement(build) -> None:  # type: ignore[no-untyped-def]
    out = scores(build, "retrieval-map", RUN, QRELS)
    assert out["map_cut_1"] == pytest.approx(1 / 3)  # precision 1 at rank 1, over 3 relevant
    assert out["map_cut_2"] == pytest.approx(1 / 3)
    assert out["map_cut_5"] == pytest.approx((1 + 2 / 3) / 3)  # plus precision 2/3 at rank 3
