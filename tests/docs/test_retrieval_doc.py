"""docs/METRICS.md's retrieval example runs through the CLI offline and scores as the page says."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.docs.test_metrics_doc import column, documented_run, same, stats


@pytest.mark.slow
def test_retrieval_example_scores_as_documented(tmp_path: Path, run_eval) -> None:  # type: ignore[no-untyped-def]
    config, _rows = documented_run("Retrieval metrics", tmp_path)
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 3, "ok": 3, "errors": 0}  # no relevant document is not a failure
    nan = math.nan
    g = 1 / math.log2(3)
    assert same(column(result, "retrieval-ndcg.ndcg_cut_1"), [1.0, 0.0, nan])
    assert same(column(result, "retrieval-ndcg.ndcg_cut_3"), [1.0, g, nan])
    assert same(column(result, "retrieval-recall.recall_1"), [0.5, 0.0, nan])
    assert same(column(result, "retrieval-recall.recall_3"), [1.0, 1.0, nan])
    assert same(column(result, "retrieval-mrr.recip_rank"), [1.0, 0.5, nan])
    assert same(column(result, "retrieval-mrr.mrr_cut_1"), [1.0, 0.0, nan])
    assert column(result, "retrieval-ndcg.nan_reason") == ["", "", "no relevant documents"]
    assert stats(result, "retrieval-ndcg.ndcg_cut_3") == (2, 1, pytest.approx((1 + g) / 2))
    assert stats(result, "retrieval-mrr.recip_rank") == (2, 1, pytest.approx(0.75))
