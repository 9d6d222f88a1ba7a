"""format: beir offline, end to end on a real Beam runner: a BEIR folder whose queries carry stored runs, scored by
every retrieval metric, each row and mean equal to pytrec_eval's."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest

from tests.retrieval.test_beir import EXAMPLE

pytrec_eval = pytest.importorskip("pytrec_eval")

CUTOFFS = [1, 3, 10]
MEASURES = {
    "ndcg_cut": "retrieval-ndcg",
    "recall": "retrieval-recall",
    "P": "retrieval-precision",
    "map_cut": "retrieval-map",
}


def folder_with_runs(tmp_path: Path) -> tuple[Path, dict[str, list[dict]]]:
    """The example folder, each query given a random scored run over the corpus (ties included), q6 judged 0 only."""
    folder = tmp_path / "minibeir"
    shutil.copytree(EXAMPLE, folder)
    rng = random.Random(5)
    corpus = [json.loads(line)["_id"] for line in (folder / "corpus.jsonl").read_text().splitlines()]
    runs = {}
    lines = []
    for line in (folder / "queries.jsonl").read_text().splitlines():
        query = json.loads(line)
        runs[query["_id"]] = [{"id": doc, "score": rng.choice([0.25, 0.5, 0.75])} for doc in rng.sample(corpus, 8)]
        lines.append(json.dumps({**query, "run": runs[query["_id"]]}))
    (folder / "queries.jsonl").write_text("\n".join(lines) + "\n")
    with (folder / "qrels" / "test.tsv").open("a") as qrels:
        qrels.write("q6\td04\t0\n")
    return folder, runs


@pytest.mark.slow
def test_a_beir_folder_with_stored_runs_scores_as_pytrec_eval(tmp_path: Path, run_eval) -> None:  # type: ignore[no-untyped-def]
    folder, runs = folder_with_runs(tmp_path)
    metrics = [{"type": t, "retrieved": "{{ item.run }}", "k": CUTOFFS} for t in [*MEASURES.values(), "retrieval-mrr"]]
    result = run_eval({"dataset": {"path": str(folder), "format": "beir", "id_field": "query_id"}, "metrics": metrics})
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 6, "ok": 6, "errors": 0}
    rows = result.rows
    assert [row["id"] for row in rows] == ["q1", "q2", "q3", "q4", "q5", "q6"]

    qrels = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query, doc, grade = line.split("\t")
        qrels.setdefault(query, {})[doc] = int(grade)
    ks = ",".join(map(str, CUTOFFS))
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {f"{m}.{ks}" for m in MEASURES} | {"recip_rank"})
    expected = evaluator.evaluate({q: {e["id"]: e["score"] for e in run} for q, run in runs.items() if q in qrels})
    for row in rows:
        query = row["id"]
        for measure, type_name in MEASURES.items():
            for k in CUTOFFS:
                value = row[f"{type_name}.{measure}_{k}"]
                if query == "q6":
                    assert math.isnan(value) and row[f"{type_name}.nan_reason"] == "no relevant documents"
                else:
                    assert value == pytest.approx(expected[query][f"{measure}_{k}"], abs=1e-12), (query, measure, k)
        if query != "q6":
            assert row["retrieval-mrr.recip_rank"] == pytest.approx(expected[query]["recip_rank"], abs=1e-12)
    judged = [q for q in expected if any(g >= 1 for g in qrels[q].values())]
    for k in CUTOFFS:
        mean = sum(expected[q][f"ndcg_cut_{k}"] for q in judged) / len(judged)
        score = result.score(f"retrieval-ndcg.ndcg_cut_{k}")
        assert (score["count"], score["nan_count"]) == (5, 1)
        assert score["mean"] == pytest.approx(mean, abs=1e-12)


def test_split_is_refused_without_format_beir(tmp_path: Path, run_eval) -> None:  # type: ignore[no-untyped-def]
    result = run_eval({"dataset": {"path": "d.jsonl", "split": "dev"}, "metrics": [{"type": "retrieval-ndcg"}]})
    assert result.code == 2 and "split applies to format: beir" in result.stderr
