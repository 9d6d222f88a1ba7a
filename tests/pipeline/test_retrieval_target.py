"""The retrieval target end to end against the test server: ranked lists equal a numpy brute force computed
here, the metrics equal pytrec_eval's on them, a rerun with the response store embeds nothing, and the
reranker's two API shapes re-order the first stage as the server's documented score says."""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.retrieval.test_beir import EXAMPLE

pytrec_eval = pytest.importorskip("pytrec_eval")

DIMENSIONS = 64
CUTOFFS = [1, 3, 5]


def words(text: str) -> list[str]:
    out, current = [], ""
    for char in text.lower() + " ":
        if char.isascii() and char.isalnum():
            current += char
        elif current:
            out.append(current)
            current = ""
    return out


def bag_of_words(text: str) -> np.ndarray:
    """docs/TESTSERVER.md's embedding, written out again: 0.5 at 0, +1 at crc32(token) % 64 for each token."""
    vector = np.zeros(DIMENSIONS)
    vector[0] = 0.5
    for word in words(text):
        vector[zlib.crc32(word.encode()) % DIMENSIONS] += 1
    return vector / np.linalg.norm(vector)


def corpus(folder: Path) -> dict[str, str]:
    """Each document's passage as the default document_template renders it: "title text", or the text alone."""
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    return {d["_id"]: f"{d['title']} {d['text']}" if d["title"] else d["text"] for d in docs}


def brute_force(folder: Path, k: int) -> dict[str, list[tuple[str, float]]]:
    """Every query's top k over the whole corpus at once: cosine, rounded to float32, ties by doc id ascending."""
    passages = corpus(folder)
    ids = list(passages)
    matrix = np.stack([bag_of_words(passages[i]) for i in ids])
    queries = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    ranked = {}
    for query_id, text in queries.items():
        scores = (matrix @ bag_of_words(text)).astype(np.float32)
        order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))[:k]
        ranked[query_id] = [(ids[i], float(scores[i])) for i in order]
    return ranked


def config(folder: Path, server: Any, **retrieval: Any) -> dict[str, Any]:
    types = ["retrieval-ndcg", "retrieval-recall", "retrieval-precision", "retrieval-map", "retrieval-mrr"]
    return {
        "dataset": {"path": str(folder), "format": "beir", "id_field": "query_id"},
        "target": {
            "retrieval": {
                "embeddings": {"url": server.base_url, "name": "test-embed", "batch_size": 5},
                "first_stage_k": 5,
                "top_k": 5,
                **retrieval,
            }
        },
        "metrics": [{"type": t, "k": CUTOFFS} for t in types],
    }


def trec(folder: Path, runs: dict[str, list[tuple[str, float]]]) -> dict[str, dict[str, float]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query, doc, grade = line.split("\t")
        qrels.setdefault(query, {})[doc] = int(grade)
    ks = ",".join(map(str, CUTOFFS))
    measures = {f"ndcg_cut.{ks}", f"recall.{ks}", f"P.{ks}", f"map_cut.{ks}", "recip_rank"}
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(
        {q: dict(run) for q, run in runs.items() if q in qrels}
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    copy = tmp_path / "minibeir"
    shutil.copytree(EXAMPLE, copy)
    return copy


@pytest.mark.slow
def test_dense_retrieval_equals_numpy_and_scores_equal_pytrec_eval(
    folder: Path, clean_server, run_eval, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    # Blocks of 5 documents: the search runs over 3 blocks and merges them.
    result = run_eval({**config(folder, clean_server, max_corpus_in_memory=5), "cache": {"path": str(store)}})
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 5, "ok": 5, "errors": 0}
    expected = brute_force(folder, 5)
    rows = result.rows
    for row in rows:
        got = json.loads(row["output_text"])
        assert [entry["id"] for entry in got] == [doc for doc, _ in expected[row["id"]]], row["id"]
        assert [entry["score"] for entry in got] == pytest.approx([s for _, s in expected[row["id"]]], abs=1e-7)
    # 12 documents in batches of 5 (3 requests) and one request per query (5).
    bodies = clean_server.stats()
    assert bodies["requests"] == 3 + 5
    oracle = trec(folder, expected)
    for row in rows:
        for name, type_name in [
            ("ndcg_cut", "retrieval-ndcg"),
            ("recall", "retrieval-recall"),
            ("P", "retrieval-precision"),
            ("map_cut", "retrieval-map"),
        ]:
            for k in CUTOFFS:
                assert row[f"{type_name}.{name}_{k}"] == pytest.approx(oracle[row["id"]][f"{name}_{k}"], abs=1e-9)
        assert row["retrieval-mrr.recip_rank"] == pytest.approx(oracle[row["id"]]["recip_rank"], abs=1e-9)
    mean = sum(oracle[q]["ndcg_cut_5"] for q in oracle) / len(oracle)
    assert result.score("retrieval-ndcg.ndcg_cut_5")["mean"] == pytest.approx(mean, abs=1e-9)

    clean_server.reset()
    again = run_eval({**config(folder, clean_server), "cache": {"path": str(store)}})
    assert again.code == 0, again.stderr
    assert clean_server.stats()["requests"] == 0  # every passage and query embedding came from the store
    assert [r["output_text"] for r in again.rows] == [r["output_text"] for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize("api", ["ranking", "rerank"])
def test_the_reranker_reorders_the_first_stage(folder: Path, clean_server, run_eval, api: str) -> None:  # type: ignore[no-untyped-def]
    reranker = {"url": clean_server.base_url, "name": "test-rerank", "api": api}
    result = run_eval(config(folder, clean_server, reranker=reranker, first_stage_k=6, top_k=3))
    assert result.code == 0, result.stderr
    passages = corpus(folder)
    queries = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    first = brute_force(folder, 6)
    for row in result.rows:
        query = queries[row["id"]]
        scored = []
        for doc, _cosine in first[row["id"]]:
            text = words(passages[doc])
            scored.append((len(set(words(query)) & set(text)) + 1 / (1 + len(text)), doc))
        expected = sorted(scored, key=lambda hit: (-hit[0], hit[1]))[:3]
        got = json.loads(row["output_text"])
        assert [e["id"] for e in got] == [doc for _, doc in expected], row["id"]
        assert [e["score"] for e in got] == pytest.approx([score for score, _ in expected])
    last = clean_server.last_request()
    assert last["path"] == ("/v1/ranking" if api == "ranking" else "/v1/rerank")
    body = last["body"]
    if api == "ranking":
        assert set(body) == {"model", "query", "passages", "truncate"} and isinstance(body["query"], dict)
    else:
        assert set(body) >= {"model", "query", "documents"} and isinstance(body["query"], str)
    assert clean_server.stats()["requests"] == 3 + 5 + 5  # passages, queries, one reranking per query


@pytest.mark.slow
def test_a_failed_query_fails_its_row_and_a_failed_corpus_batch_fails_the_run(
    folder: Path, clean_server, run_eval
) -> None:  # type: ignore[no-untyped-def]
    clean_server.configure(rules=[{"match": "capital city of france", "status": 400}])
    result = run_eval({**config(folder, clean_server), "params": {"ignore_request_failure": True}})
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 5, "ok": 4, "errors": 1}
    (error,) = result.errors
    assert error["phase"] == "sample_generation" and "embedding the query" in error["error"]
    assert "HTTP 400" in error["error"]

    clean_server.reset(config=True)
    clean_server.configure(rules=[{"match": "Dataflow, Flink", "status": 400}])
    failed = run_eval(config(folder, clean_server))
    assert failed.code != 0
    assert "embedding the corpus failed for documents 'd01'..'d05'" in failed.stderr


def test_the_preflight_checks_the_query_template_and_the_reranker(folder: Path, clean_server, run_eval) -> None:  # type: ignore[no-untyped-def]
    wrong_field = run_eval(config(folder, clean_server, query_template="{{ item.question }}"))
    assert wrong_field.code == 2 and "question" in wrong_field.stderr
    unreachable = {"url": "http://127.0.0.1:9/v1", "name": "r"}
    no_reranker = run_eval(config(folder, clean_server, reranker=unreachable))
    assert no_reranker.code == 2 and "target.retrieval.reranker" in no_reranker.stderr
    assert clean_server.stats()["requests"] == 0  # nothing embedded before the checks failed


@pytest.mark.slow
def test_two_retrievers_compared_in_one_run(folder: Path, clean_server, run_eval) -> None:  # type: ignore[no-untyped-def]
    single = config(folder, clean_server)
    dense = single["target"]["retrieval"]
    reranker = {"url": clean_server.base_url, "name": "test-rerank"}
    targets = [
        {"name": "dense", "retrieval": dense},
        {"name": "reranked", "retrieval": {**dense, "reranker": reranker}},
    ]
    result = run_eval({**{k: v for k, v in single.items() if k != "target"}, "targets": targets})
    assert result.code == 0, result.stderr
    for name in ("dense", "reranked"):
        summary = json.loads((result.output / "targets" / name / "results.json").read_text())
        assert summary["counts"] == {"rows": 5, "ok": 5, "errors": 0}
