"""The test server's retrieval routes: deterministic embeddings, NIM ranking and hosted rerank.

Every answer is a pure function of the request, so a test can compute the expected ranking
on its own (docs/TESTSERVER.md, "Retrieval routes"):

* **Embeddings** (``POST /v1/embeddings``, ``/embeddings``): a hashed bag of words. A
  text's tokens are its lower-cased runs of ``[a-z0-9]``; the vector has ``dimensions``
  components (default 64); component 0 starts at 0.5 (so an empty text still has a
  direction) and each token adds 1 to component ``zlib.crc32(token) % dimensions``. Texts
  sharing words have a high cosine similarity. ``input_type``, when sent, must be ``query``
  or ``passage``.
* **Ranking** (``POST /v1/ranking``, ``/ranking``: NIM's ``{model, query: {text},
  passages: [{text}]}``) and **rerank** (``POST /v1/rerank``, ``/rerank``: ``{model, query,
  documents, top_n?}``): a passage's score is the number of distinct query tokens it
  contains plus ``1 / (1 + its token count)``; answered best first (ties by index) as
  ``rankings: [{index, logit}]`` or ``results: [{index, relevance_score}]``.

The routes count in ``/_stats`` like inference routes, honour ``api_key``, and obey the
fault rules (``latency_ms``, injected error statuses) on the request's texts joined.
"""

from __future__ import annotations

import asyncio
import json
import re
import zlib
from typing import Any

from aiohttp import web

from beameval.testserver.replies import error_body
from beameval.testserver.wire import json_response, request_record

__all__ = ["ROUTES", "embed", "rank_score", "retrieval_reply", "tokens"]

ROUTES = {
    "/v1/embeddings": "embeddings",
    "/embeddings": "embeddings",
    "/v1/ranking": "ranking",
    "/ranking": "ranking",
    "/v1/rerank": "rerank",
    "/rerank": "rerank",
}
DEFAULT_DIMENSIONS = 64
_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """A text's tokens: its lower-cased runs of ASCII letters and digits."""
    return _TOKEN.findall(text.lower())


def embed(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The hashed bag-of-words vector of ``text``."""
    vector = [0.0] * dimensions
    vector[0] = 0.5
    for token in tokens(text):
        vector[zlib.crc32(token.encode("utf-8")) % dimensions] += 1.0
    return vector


def rank_score(query: str, passage: str) -> float:
    """The reranker's score: distinct query tokens found in the passage, plus 1 / (1 + passage tokens)."""
    words = tokens(passage)
    return len(set(tokens(query)) & set(words)) + 1.0 / (1 + len(words))


def _answer(kind: str, body: dict[str, Any]) -> tuple[int, Any, str]:
    """``(status, reply, the request's texts joined)`` for one well-formed JSON body."""
    if kind == "embeddings":
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else inputs
        dimensions = body.get("dimensions", DEFAULT_DIMENSIONS)
        if not isinstance(inputs, list) or not inputs or not all(isinstance(text, str) for text in inputs):
            return 400, error_body(400, "'input' must be a text or a non-empty list of texts"), ""
        if body.get("input_type", "query") not in ("query", "passage"):
            return 400, error_body(400, "'input_type' must be 'query' or 'passage'"), ""
        if not isinstance(dimensions, int) or not 1 <= dimensions <= 4096:
            return 400, error_body(400, "'dimensions' must be an integer in 1..4096"), ""
        count = sum(len(tokens(text)) for text in inputs)
        data = [
            {"object": "embedding", "index": i, "embedding": embed(text, dimensions)} for i, text in enumerate(inputs)
        ]
        reply = {"object": "list", "data": data, "model": body.get("model"), "usage": _usage(count)}
        return 200, reply, "\n".join(inputs)
    if kind == "ranking":
        query = body.get("query", {}).get("text") if isinstance(body.get("query"), dict) else None
        passages = body.get("passages")
        texts = (
            [p.get("text") for p in passages]
            if isinstance(passages, list) and all(isinstance(p, dict) for p in passages)
            else None
        )
    else:
        query, texts = body.get("query"), body.get("documents")
    if not isinstance(query, str) or not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        shape = "{model, query: {text}, passages: [{text}]}" if kind == "ranking" else "{model, query, documents}"
        return 400, error_body(400, f"the body must be {shape}"), ""
    order = sorted(range(len(texts)), key=lambda i: (-rank_score(query, texts[i]), i))
    count = len(tokens(query)) + sum(len(tokens(text)) for text in texts)
    if kind == "ranking":
        reply = {"rankings": [{"index": i, "logit": rank_score(query, texts[i])} for i in order]}
    else:
        top_n = body.get("top_n")
        kept = order[:top_n] if isinstance(top_n, int) and top_n > 0 else order
        reply = {"results": [{"index": i, "relevance_score": rank_score(query, texts[i])} for i in kept]}
    return 200, {**reply, "model": body.get("model"), "usage": _usage(count)}, "\n".join([query, *texts])


def _usage(count: int) -> dict[str, int]:
    return {"prompt_tokens": count, "total_tokens": count}


async def retrieval_reply(server: Any, request: web.Request) -> web.Response:
    """Answer a retrieval route (``ROUTES``) for ``server`` (the ``StubServer``: its faults and stats).

    The server checks the key first; then the method, the counters and the faults, then the reply.
    """
    if request.method != "POST":
        return json_response(405, error_body(405, "use POST"))
    raw = await request.read()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    record = request_record(request, body)
    if not isinstance(body, dict):
        server.stats.arrived("", record)
        server.stats.answered(400)
        return json_response(400, error_body(400, "the body must be a JSON object"))
    status, reply, prompt = _answer(ROUTES[request.path], body)
    server.stats.arrived(prompt, record)
    outcome = server.faults.decide(prompt)
    server.stats.enter()
    try:
        if outcome.delay_s > 0:
            await asyncio.sleep(outcome.delay_s)
    finally:
        server.stats.leave()
    if outcome.action == "error" and outcome.status is not None:
        status, reply = outcome.status, error_body(outcome.status, f"injected fault: HTTP {outcome.status}")
    server.stats.answered(status)
    return json_response(status, reply)
