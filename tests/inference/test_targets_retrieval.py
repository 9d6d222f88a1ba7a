"""The retrieval target's handlers: URLs and bodies of every embeddings and reranker shape, and replies refused."""

from __future__ import annotations

import math

import pytest

from beameval.config.retrieval import EmbeddingsEndpoint, RerankerEndpoint
from beameval.core.errors import TemplateError
from beameval.inference.errors import MalformedResponseError
from beameval.inference.targets.retrieval import EmbeddingsHandler, RerankHandler


def embeddings(**fields: object) -> EmbeddingsHandler:
    return EmbeddingsHandler(EmbeddingsEndpoint(url="http://h/v1", name="e", **fields), "secret")


def reranker(**fields: object) -> RerankHandler:
    return RerankHandler(RerankerEndpoint(url="http://h/v1/", name="r", **fields), None)


def test_embeddings_request_for_nim_and_openai() -> None:
    prepared = embeddings().prepare({"input": ["a", "b"], "input_type": "passage"})
    assert prepared.url == "http://h/v1/embeddings"
    assert prepared.body == {"model": "e", "input": ["a", "b"], "encoding_format": "float", "input_type": "passage"}
    assert prepared.headers["Authorization"] == "Bearer secret"
    openai = embeddings(format="openai", dimensions=256).prepare({"input": ["q"], "input_type": "query"})
    assert openai.body == {"model": "e", "input": ["q"], "encoding_format": "float", "dimensions": 256}
    full_url = EmbeddingsHandler(EmbeddingsEndpoint(url="http://h/v1/embeddings", name="e"), None)
    assert full_url.url == "http://h/v1/embeddings" and full_url.probe_url == "http://h/v1/models"
    with pytest.raises(TemplateError, match="'input' must be a non-empty list of texts"):
        embeddings().prepare({"input": [], "input_type": "query"})


def test_embeddings_reply_is_ordered_by_index_and_checked() -> None:
    reply = {
        "data": [{"index": 1, "embedding": [0, 1]}, {"index": 0, "embedding": [1, 0]}],
        "usage": {"prompt_tokens": 4},
    }
    assert embeddings().parse(200, reply) == {
        "vectors": [[1.0, 0.0], [0.0, 1.0]],
        "usage": {"prompt_tokens": 4, "completion_tokens": 0},
    }
    for bad, message in [
        ({}, "no embeddings"),
        ({"data": [{"index": 0}]}, "lacks its 'index' or its numbers"),
        ({"data": [{"index": 1, "embedding": [1]}]}, "indexes are not 0..0"),
        ({"data": [{"index": 0, "embedding": [1]}, {"index": 1, "embedding": [1, 2]}]}, "different widths"),
        ({"data": [{"index": 0, "embedding": [math.nan]}]}, "NaN or Infinity"),
    ]:
        with pytest.raises(MalformedResponseError, match=message):
            embeddings().parse(200, bad)


def test_reranker_shapes_and_routes() -> None:
    nim = reranker().prepare({"query": "q", "passages": ["p1", "p2"]})
    assert nim.url == "http://h/v1/ranking"
    assert nim.body == {
        "model": "r",
        "query": {"text": "q"},
        "passages": [{"text": "p1"}, {"text": "p2"}],
        "truncate": "END",
    }
    hosted = reranker(api="rerank").prepare({"query": "q", "passages": ["p1"]})
    assert hosted.url == "http://h/v1/rerank"
    assert hosted.body == {"model": "r", "query": "q", "documents": ["p1"], "top_n": 1}
    # The reference's other two hosted routes: flat shape at /ranking/<model>, nested at /retrieval/.../reranking.
    assert (
        reranker(api="rerank", path="/ranking/r").prepare({"query": "q", "passages": ["p"]}).url
        == "http://h/v1/ranking/r"
    )
    assert reranker(path="/retrieval/r/reranking").url == "http://h/v1/retrieval/r/reranking"


def test_reranker_reads_either_reply_shape_in_passage_order() -> None:
    ranked = {"rankings": [{"index": 1, "logit": 3.5}, {"index": 0, "logit": -1}]}
    assert reranker().parse(200, ranked)["scores"] == [-1.0, 3.5]
    results = {"results": [{"index": 0, "relevance_score": 0.25}, {"index": 1, "relevance_score": 0.5}]}
    assert reranker(api="rerank").parse(200, results)["scores"] == [0.25, 0.5]
    for bad in ({"data": []}, {"rankings": [{"index": 0}]}, {"rankings": [{"index": 2, "logit": 1}]}):
        with pytest.raises(MalformedResponseError):
            reranker().parse(200, bad)
