"""``target: {retrieval: ...}``: an embedding endpoint, an optional reranker, and the corpus they search.

The target embeds every corpus document once (``input_type: passage``) and each query row
(``input_type: query``), finds the ``first_stage_k`` nearest documents by cosine similarity
exactly, lets the reranker re-score them when one is set, and answers the row with the
ranked list ``[{id, score}]`` of the best ``top_k`` (``transforms.retrieval``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from beameval.config.access import EndpointAccess
from beameval.config.frozen import Frozen
from beameval.core.validators import header_fields, http_url

__all__ = ["DEFAULT_DOCUMENT_TEMPLATE", "CorpusConfig", "EmbeddingsEndpoint", "RerankerEndpoint", "RetrievalTarget"]

#: A document's text as the reference SDK sends it: "title text", or the text alone.
DEFAULT_DOCUMENT_TEMPLATE = "{% if doc.title %}{{ doc.title }} {% endif %}{{ doc.text }}"


class _Endpoint(EndpointAccess):
    """An endpoint reached by POSTing JSON: its URL (a base such as ``http://h/v1`` or the full route) and model."""

    url: str
    name: str
    default_headers: dict[str, str] | None = None

    _url = field_validator("url")(http_url)

    @field_validator("default_headers")
    @classmethod
    def _plain_headers(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        header_fields(headers)
        return headers


class EmbeddingsEndpoint(_Endpoint):
    """An OpenAI-compatible ``POST /embeddings`` endpoint.

    Attributes:
        format: ``nim`` sends ``input_type`` (``passage`` or ``query``), which NIM's asymmetric
            models need; ``openai`` leaves it out.
        batch_size: documents per embeddings request.
        dimensions: asked for when set (``dimensions`` in the request); else the model's own width.
    """

    format: Literal["nim", "openai"] = "nim"
    batch_size: Annotated[int, Field(ge=1, le=4096)] = 32
    dimensions: Annotated[int, Field(ge=1)] | None = None


class RerankerEndpoint(_Endpoint):
    """A reranker: NIM's ``POST /ranking`` or the hosted ``POST /rerank`` shape, chosen by ``api``.

    Attributes:
        api: the body's shape: ``ranking``: ``{model, query: {text}, passages: [{text}], truncate}``;
            ``rerank``: ``{model, query, documents, top_n}``. Either reply shape is read
            (``rankings: [{index, logit}]`` or ``results: [{index, relevance_score}]``).
        path: the route after the URL's base; None: ``/ranking`` or ``/rerank`` by ``api``.
            The hosted routes ``/ranking/<model>`` (``api: rerank``) and
            ``/retrieval/<model>/reranking`` (``api: ranking``) are set here.
    """

    api: Literal["ranking", "rerank"] = "ranking"
    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9_.~/\-]*$")] | None = None


class CorpusConfig(Frozen):
    """The documents to search: a BEIR folder (its ``corpus.jsonl``) or a JSONL file of ``{_id, title?, text}``."""

    path: str
    format: Literal["beir", "jsonl"] = "beir"


class RetrievalTarget(Frozen):
    """Dense retrieval over a corpus, optionally reranked.

    Attributes:
        embeddings: the embedding endpoint (documents and queries).
        reranker: re-scores the first stage's documents of each query; None keeps the cosine order.
        first_stage_k: how many documents the dense search keeps per query.
        top_k: how many documents the row's answer lists (at most ``first_stage_k``).
        corpus: where the documents are; None: the dataset's own BEIR folder.
        query_template: the text embedded for a row.
        document_template: the text embedded for a document (sees ``doc.id``, ``doc.title``, ``doc.text``).
        truncate: how a text longer than ``max_chars`` is cut: ``end`` keeps its start, ``start``
            its end, null fails (the row, or the run for a document).
        max_chars: the longest text sent (NIM's limit is 65,535 characters).
        max_corpus_in_memory: the most document vectors one worker holds at once; the search
            runs over blocks of at most this many (and at most 16,384) documents.
    """

    embeddings: EmbeddingsEndpoint
    reranker: RerankerEndpoint | None = None
    first_stage_k: Annotated[int, Field(ge=1, le=100_000)] = 100
    top_k: Annotated[int, Field(ge=1, le=100_000)] = 100
    corpus: CorpusConfig | None = None
    query_template: str = "{{ item.text }}"
    document_template: str = DEFAULT_DOCUMENT_TEMPLATE
    truncate: Literal["end", "start"] | None = "end"
    max_chars: Annotated[int, Field(ge=1)] = 65_535
    max_corpus_in_memory: Annotated[int, Field(ge=1)] = 200_000

    @model_validator(mode="after")
    def _top_within_first_stage(self) -> RetrievalTarget:
        if self.top_k > self.first_stage_k:
            raise ValueError(
                f"top_k ({self.top_k}) cannot exceed first_stage_k ({self.first_stage_k}): the answer lists "
                "documents the first stage found"
            )
        return self
