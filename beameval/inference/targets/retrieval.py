"""Requests to and replies from a retrieval target's endpoints: embeddings, and a reranker in two shapes.

Both are ``TargetHandler``s, so their requests go through the shared ``InferenceEngine``
(retries, rate limits, budgets, the journal) like a model's. ``prepare`` takes the texts
to send as a mapping (``{"input": [...], "input_type": ...}`` or ``{"query": ..., "passages":
[...]}``); ``parse`` returns a sample holding the numbers (``vectors`` or ``scores``, one
per text, in the request's order) and ``usage``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from beameval.config.retrieval import EmbeddingsEndpoint, RerankerEndpoint
from beameval.core.errors import TemplateError
from beameval.inference.errors import MalformedResponseError
from beameval.inference.prepared import PreparedRequest
from beameval.inference.targets.base import TargetHandler, endpoint_key

__all__ = ["EmbeddingsHandler", "RerankHandler", "route_url"]


def route_url(url: str, route: str) -> tuple[str, str]:
    """``(base, base + route)`` for a URL given as a base (``http://h/v1``) or already ending in a known route."""
    base = url.split("?", 1)[0].rstrip("/")
    for suffix in ("/embeddings", "/ranking", "/rerank", "/chat/completions", "/completions"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base, f"{base}{route}"


class _JsonEndpoint(TargetHandler):
    """Headers, key and limits shared by the retrieval endpoints."""

    def __init__(self, target: EmbeddingsEndpoint | RerankerEndpoint, route: str, api_key: str | None) -> None:
        self.target = target
        base, self.url = route_url(target.url, route)
        self.endpoint_key = endpoint_key(base, target.name, api_key)
        self.probe_url = f"{base}/models"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(target.default_headers or {})
        headers.update(target.key_headers(api_key))
        self.headers = headers
        self.secrets = (api_key,) if api_key else ()
        self.ca_bundle = target.ca_bundle
        self.max_response_bytes = target.max_response_bytes


class EmbeddingsHandler(_JsonEndpoint):
    """``POST <base>/embeddings``: ``{model, input: [...], encoding_format: float, input_type?, dimensions?}``."""

    def __init__(self, target: EmbeddingsEndpoint, api_key: str | None) -> None:
        super().__init__(target, "/embeddings", api_key)
        self.embeddings = target

    def prepare(self, rendered: Any, item: Mapping[str, Any] | None = None) -> PreparedRequest:
        """``rendered``: ``{"input": [texts], "input_type": "passage" | "query"}``."""
        texts = _strings(rendered, "input")
        body: dict[str, Any] = {"model": self.embeddings.name, "input": texts, "encoding_format": "float"}
        if self.embeddings.format == "nim":
            body["input_type"] = rendered["input_type"]
        if self.embeddings.dimensions is not None:
            body["dimensions"] = self.embeddings.dimensions
        return PreparedRequest(url=self.url, body=body, headers=self.headers)

    def parse(self, status: int, json_body: Any) -> dict[str, Any]:
        data = json_body.get("data") if isinstance(json_body, dict) else None
        if not isinstance(data, list) or not data:
            raise MalformedResponseError("it has no embeddings ('data' is missing or empty)")
        try:
            ordered = sorted(data, key=lambda entry: int(entry["index"]))
            vectors = [[float(value) for value in entry["embedding"]] for entry in ordered]
        except (KeyError, TypeError, ValueError):
            raise MalformedResponseError("an embedding lacks its 'index' or its numbers") from None
        if [int(entry["index"]) for entry in ordered] != list(range(len(vectors))):
            raise MalformedResponseError(f"its indexes are not 0..{len(vectors) - 1}")
        width = len(vectors[0])
        if width == 0 or any(len(vector) != width for vector in vectors):
            raise MalformedResponseError("its embeddings are empty or of different widths")
        if not all(math.isfinite(value) for vector in vectors for value in vector):
            raise MalformedResponseError("an embedding holds NaN or Infinity")
        return {"vectors": vectors, **_usage(json_body)}


class RerankHandler(_JsonEndpoint):
    """NIM ``POST <base>/ranking`` or hosted ``POST <base>/rerank`` (``reranker.api``; ``reranker.path`` for others)."""

    def __init__(self, target: RerankerEndpoint, api_key: str | None, truncate: str | None = "end") -> None:
        super().__init__(target, target.path or ("/ranking" if target.api == "ranking" else "/rerank"), api_key)
        self.reranker = target
        self.truncate = "START" if truncate == "start" else "END" if truncate == "end" else "NONE"

    def prepare(self, rendered: Any, item: Mapping[str, Any] | None = None) -> PreparedRequest:
        """``rendered``: ``{"query": text, "passages": [texts]}``."""
        passages = _strings(rendered, "passages")
        query = rendered.get("query")
        if not isinstance(query, str):
            raise TemplateError("the reranker's query must be text")
        body: dict[str, Any]
        if self.reranker.api == "ranking":
            body = {
                "model": self.reranker.name,
                "query": {"text": query},
                "passages": [{"text": text} for text in passages],
                "truncate": self.truncate,
            }
        else:
            body = {"model": self.reranker.name, "query": query, "documents": passages, "top_n": len(passages)}
        return PreparedRequest(url=self.url, body=body, headers=self.headers)

    def parse(self, status: int, json_body: Any) -> dict[str, Any]:
        field = "rankings" if isinstance(json_body, dict) and "rankings" in json_body else "results"
        entries = json_body.get(field) if isinstance(json_body, dict) else None
        if not isinstance(entries, list):
            raise MalformedResponseError("it has no 'rankings' or 'results' list")
        scores: dict[int, float] = {}
        try:
            for entry in entries:
                value = entry.get("logit", entry.get("relevance_score", entry.get("score")))
                scores[int(entry["index"])] = float(value)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise MalformedResponseError(f"a '{field}' entry lacks its index or score") from None
        if sorted(scores) != list(range(len(scores))) or not all(math.isfinite(v) for v in scores.values()):
            raise MalformedResponseError("its indexes are not each passage once, or a score is not finite")
        return {"scores": [scores[index] for index in range(len(scores))], **_usage(json_body)}


def _strings(rendered: Any, field: str) -> list[str]:
    values = rendered.get(field) if isinstance(rendered, Mapping) else None
    if not isinstance(values, list) or not values or not all(isinstance(value, str) for value in values):
        raise TemplateError(f"a retrieval request's '{field}' must be a non-empty list of texts")
    return values


def _usage(json_body: dict[str, Any]) -> dict[str, Any]:
    usage = json_body.get("usage")
    tokens = usage.get("prompt_tokens", usage.get("total_tokens")) if isinstance(usage, dict) else None
    return {"usage": {"prompt_tokens": int(tokens), "completion_tokens": 0}} if isinstance(tokens, int) else {}
