"""The test server's retrieval routes over real HTTP: the documented embedding and scores, shapes, key, faults."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from beameval.testserver.harness import ServerProcess
from beameval.testserver.retrieval import ROUTES

DOC = Path(__file__).resolve().parents[2] / "docs" / "TESTSERVER.md"


@pytest.fixture
def client(clean_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=clean_server.base_url, trust_env=False, timeout=5.0) as http:
        yield http


def test_every_retrieval_route_is_documented() -> None:
    page = DOC.read_text(encoding="utf-8")
    for path in ROUTES:
        assert f"`POST {path}`" in page, path


def test_embeddings_are_the_documented_hashed_bag_of_words(client: httpx.Client) -> None:
    reply = client.post("/embeddings", json={"model": "e", "input": ["Beam, beam runs!", ""], "dimensions": 16})
    assert reply.status_code == 200
    body = reply.json()
    expected = [0.5] + [0.0] * 15
    for word in ("beam", "beam", "runs"):
        expected[zlib.crc32(word.encode()) % 16] += 1
    assert [entry["index"] for entry in body["data"]] == [0, 1]
    assert body["data"][0]["embedding"] == expected
    assert body["data"][1]["embedding"] == [0.5] + [0.0] * 15
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    bad = client.post("/embeddings", json={"model": "e", "input": ["x"], "input_type": "document"})
    assert bad.status_code == 400 and "input_type" in bad.json()["error"]["message"]


def test_ranking_and_rerank_score_by_shared_words(client: httpx.Client) -> None:
    passages = ["nothing here", "beam pipelines run on beam", "a beam"]
    ranking = client.post(
        "/ranking",
        json={"model": "r", "query": {"text": "beam pipelines"}, "passages": [{"text": p} for p in passages]},
    ).json()
    assert ranking["rankings"] == [
        {"index": 1, "logit": 2 + 1 / 6},
        {"index": 2, "logit": 1 + 1 / 3},
        {"index": 0, "logit": 0 + 1 / 3},
    ]
    rerank = client.post("/rerank", json={"model": "r", "query": "beam pipelines", "documents": passages, "top_n": 2})
    assert rerank.json()["results"] == [
        {"index": 1, "relevance_score": 2 + 1 / 6},
        {"index": 2, "relevance_score": 1 + 1 / 3},
    ]
    wrong = client.post("/rerank", json={"model": "r", "query": {"text": "q"}, "passages": []})
    assert wrong.status_code == 400 and "{model, query, documents}" in wrong.json()["error"]["message"]


def test_retrieval_routes_count_need_the_key_and_obey_faults(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(api_key="k", rules=[{"match": "fail me", "status": 503}])
    assert client.post("/embeddings", json={"input": ["x"]}).status_code == 401
    headers = {"Authorization": "Bearer k"}
    assert client.post("/embeddings", json={"input": ["x"]}, headers=headers).status_code == 200
    failed = client.post("/embeddings", json={"input": ["please fail me"]}, headers=headers)
    assert failed.status_code == 503
    stats = clean_server.stats()
    assert stats["requests"] == 2 and stats["by_status"] == {"200": 1, "503": 1}
    assert clean_server.last_request()["body"] == {"input": ["please fail me"]}
