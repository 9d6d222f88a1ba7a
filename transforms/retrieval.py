"""Retrieve: a retrieval target's stage, from the query rows to each row's ranked list (in place of GenerateSamples).

1. The corpus file is read once, in order, and cut into ``embeddings.batch_size`` batches
   by position (so a rerun builds the same requests, and the store answers them); each
   batch is one ``input_type: passage`` embeddings request (``retrieval_calls``).
2. Each query row's text is one ``input_type: query`` request.
3. Exact search, with no shuffle of vectors: each worker gathers the corpus vectors it
   received into a block of at most ``max_corpus_in_memory`` (and 16,384) documents,
   scores every query against it (the query vectors are a side input), keeps each
   query's best and drops the block; a CombineFn merges the blocks' lists per query
   (``beameval.retrieval.search``). No worker holds more than one block of vectors.
4. With a reranker, each query's first-stage documents are joined with their passages
   (a shuffle keyed by document id) and re-scored in one request per query.

A failed corpus request fails the run (every ranking would miss its documents); a failed
query or rerank request fails its row, like a failed model request.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils.windowed_value import WindowedValue

from beameval.config.retrieval import RetrievalTarget
from beameval.config.schema import EvalConfig
from beameval.core.errors import DatasetError, EndpointError, EvaluatorError
from beameval.core.records import EndpointReply, GeneratedRow, InferenceInfo, InputRow, RowFailure
from beameval.inference.targets.retrieval import EmbeddingsHandler, RerankHandler
from beameval.retrieval.beir import CORPUS_FILE, iter_corpus
from beameval.retrieval.passages import Texts
from beameval.retrieval.search import Hit, block_top_k, merge_top_k, unit_rows
from transforms.async_calls import in_global_window
from transforms.retrieval_calls import CallEndpoint, Endpoint

__all__ = ["Retrieve", "TopKFn", "corpus_path"]

RowKey = tuple[int, int]  # (row_index, sample_index)
_BLOCK_CAP = 16_384


def corpus_path(config: EvalConfig) -> str:
    """The corpus file: ``corpus.path`` (a BEIR folder's ``corpus.jsonl``, or a JSONL file), else the dataset's."""
    assert config.target is not None and config.target.retrieval is not None
    corpus = config.target.retrieval.corpus
    if corpus is None:
        return FileSystems.join(config.dataset.path.rstrip("/"), CORPUS_FILE)
    return FileSystems.join(corpus.path.rstrip("/"), CORPUS_FILE) if corpus.format == "beir" else corpus.path


def _texts(target: RetrievalTarget) -> Texts:
    return Texts(target.query_template, target.document_template, target.truncate, target.max_chars)


def _corpus_batches(path: str, target: RetrievalTarget) -> Iterator[tuple[tuple[int, list[str]], dict[str, Any]]]:
    """``((batch number, ids), {input, input_type})`` for every ``batch_size`` documents, in file order."""
    texts, size = _texts(target), target.embeddings.batch_size
    ids: list[str] = []
    passages: list[str] = []
    number = 0
    try:
        with FileSystems.open(path) as stream:
            for document in iter_corpus(stream, path):
                ids.append(document.id)
                passages.append(texts.passage(document))
                if len(ids) == size:
                    yield (number, ids), {"input": passages, "input_type": "passage"}
                    ids, passages, number = [], [], number + 1
    except EvaluatorError:
        raise
    except Exception as exc:  # noqa: BLE001 - every file system says "cannot read" its own way
        raise DatasetError(f"cannot read the retrieval corpus {path!r}: {type(exc).__name__}: {exc}") from None
    if ids:
        yield (number, ids), {"input": passages, "input_type": "passage"}


def _passages(batch: tuple[tuple[int, list[str]], dict[str, Any]]) -> Iterator[tuple[str, str]]:
    (_number, ids), rendered = batch
    yield from zip(ids, rendered["input"], strict=True)


def _document_vectors(answered: tuple[tuple[int, list[str]], EndpointReply]) -> tuple[list[str], np.ndarray]:
    """A corpus batch's ids and vectors; a failed batch fails the run (its documents would be missing)."""
    (_number, ids), reply = answered
    vectors = None if reply.sample is None else reply.sample.get("vectors")
    if reply.error is not None or vectors is None or len(vectors) != len(ids):
        cause = reply.error or f"{0 if vectors is None else len(vectors)} vectors for {len(ids)} documents"
        raise EndpointError(f"embedding the corpus failed for documents {ids[0]!r}..{ids[-1]!r}: {cause}")
    return ids, np.asarray(vectors, dtype=np.float32)


class _SearchBlocks(beam.DoFn):
    """Corpus replies -> each query's best ``k`` of every block of ``block_docs`` documents this worker embedded.

    The vectors never cross a shuffle: each worker gathers the batches it received into a
    block, scores every query against it when it is full (and at the end of the bundle),
    and forgets it; only the per-query lists go on to ``TopKFn``. The query vectors are the
    side input; ``finish_bundle`` (which gets no side input) reuses the ones ``process`` saw.
    """

    def __init__(self, k: int, block_docs: int) -> None:
        self._k = k
        self._block_docs = block_docs

    def start_bundle(self) -> None:
        self._ids: list[str] = []
        self._vectors: list[np.ndarray] = []
        self._queries: tuple[list[RowKey], np.ndarray] | None = None

    def process(
        self, answered: tuple[tuple[int, list[str]], EndpointReply], queries: list[tuple[RowKey, np.ndarray]]
    ) -> Iterator[tuple[RowKey, list[Hit]]]:
        ids, vectors = _document_vectors(answered)
        if self._queries is None:
            keys = [key for key, _vector in queries]
            self._queries = (keys, np.stack([vector for _key, vector in queries]) if queries else np.zeros((0, 1)))
        self._ids += ids
        self._vectors.append(vectors)
        if len(self._ids) >= self._block_docs:
            yield from self._search()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for element in self._search():
            yield in_global_window(element)

    def _search(self) -> Iterator[tuple[RowKey, list[Hit]]]:
        if not self._ids or self._queries is None:
            return
        ids, documents = self._ids, unit_rows(np.concatenate(self._vectors))
        self._ids, self._vectors = [], []
        keys, queries = self._queries
        yield from block_top_k(keys, queries, ids, documents, self._k)  # type: ignore[misc]


class TopKFn(beam.CombineFn):  # type: ignore[misc]
    """Merges the blocks' hit lists of one query into its best ``k`` (``search.merge_top_k``)."""

    def __init__(self, k: int) -> None:
        self._k = k

    def create_accumulator(self) -> list[Hit]:
        return []

    def add_input(self, accumulator: list[Hit], hits: list[Hit]) -> list[Hit]:
        return merge_top_k([accumulator, hits], self._k)

    def merge_accumulators(self, accumulators: Iterable[list[Hit]]) -> list[Hit]:
        return merge_top_k(accumulators, self._k)

    def extract_output(self, accumulator: list[Hit]) -> list[Hit]:
        return accumulator


class _QueryRequests(beam.DoFn):
    """InputRow -> ``(key, row)`` on ``rows``, ``(key, {input, input_type})`` on ``requests``; failures on ``done``."""

    def __init__(self, target: RetrievalTarget) -> None:
        self._target = target

    def setup(self) -> None:
        self._texts = _texts(self._target)

    def process(self, row: InputRow) -> Iterator[Any]:
        if row.failure is not None or row.item is None:
            failed = GeneratedRow(row.row_index, row.item, {}, row.raw, row.failure, sample_index=row.sample_index)
            yield beam.pvalue.TaggedOutput("done", failed)
            return
        try:
            text = self._texts.query(row.item)
        except EvaluatorError as exc:
            yield beam.pvalue.TaggedOutput("done", _failed(row, f"row {row.row_index}: {exc}"))
            return
        key = (row.row_index, row.sample_index)
        yield beam.pvalue.TaggedOutput("rows", (key, dataclasses.replace(row, request=text)))
        yield beam.pvalue.TaggedOutput("requests", (key, {"input": [text], "input_type": "query"}))


def _query_vector(answered: tuple[RowKey, EndpointReply]) -> Iterator[tuple[RowKey, np.ndarray]]:
    key, reply = answered
    vectors = None if reply.sample is None else reply.sample.get("vectors")
    if vectors is not None and len(vectors) == 1:
        try:
            yield key, unit_rows(vectors)[0]
        except ValueError:  # an all-zero query vector: the row fails in _first_stage
            return


def _failed(row: InputRow, message: str, info: InferenceInfo | None = None) -> GeneratedRow:
    failure = RowFailure("sample_generation", [message])
    return GeneratedRow(
        row.row_index, row.item, {}, row.raw, failure, info, sample_index=row.sample_index, notes=row.notes
    )


def _info(replies: list[EndpointReply]) -> InferenceInfo:
    """What the row's calls cost: the query's embedding and, with a reranker, its reranking."""
    return InferenceInfo(
        latency_s=sum(reply.latency_s for reply in replies),
        attempts=sum(reply.attempts for reply in replies),
        http_status=replies[-1].status,
        prompt_tokens=sum(reply.prompt_tokens or 0 for reply in replies),
        completion_tokens=0,
        cached=all(reply.cached for reply in replies),
    )


def _first_stage(joined: tuple[RowKey, dict[str, list[Any]]]) -> Iterator[Any]:
    """``(key, {rows, replies, hits})`` -> ``(key, (row, query reply, hits))``, or a failed row on ``done``."""
    key, parts = joined
    if not parts["rows"]:
        return
    row, reply = parts["rows"][0], parts["replies"][0]
    if reply.error is not None or reply.sample is None:
        message = f"row {row.row_index} failed inference: embedding the query: {reply.error or 'no answer'}"
        yield beam.pvalue.TaggedOutput("done", _failed(row, message, _info([reply])))
        return
    vectors = reply.sample.get("vectors") or []
    if len(vectors) != 1 or not np.any(np.asarray(vectors[0])):
        message = f"row {row.row_index} failed inference: the query's embedding is empty or all zeros"
        yield beam.pvalue.TaggedOutput("done", _failed(row, message, _info([reply])))
        return
    yield key, (row, reply, parts["hits"][0] if parts["hits"] else [])


def _answered(row: InputRow, hits: list[Hit], replies: list[EndpointReply], models: dict[str, str]) -> GeneratedRow:
    ranked = [{"id": doc_id, "score": score} for score, doc_id in hits]
    sample = {"output": ranked, "output_text": json.dumps(ranked), "response": models}
    return GeneratedRow(
        row.row_index, row.item, sample, inference=_info(replies), sample_index=row.sample_index, notes=row.notes
    )


def _finish(element: tuple[RowKey, tuple[InputRow, EndpointReply, list[Hit]]], top_k: int, models: dict[str, str]):  # type: ignore[no-untyped-def]
    _key, (row, reply, hits) = element
    return _answered(row, hits[:top_k], [reply], models)


def _candidates(element: tuple[RowKey, tuple[InputRow, EndpointReply, list[Hit]]]) -> Iterator[tuple[str, RowKey]]:
    key, (_row, _reply, hits) = element
    for _score, doc_id in hits:
        yield doc_id, key


def _passages_of(joined: tuple[str, dict[str, list[Any]]]) -> Iterator[tuple[RowKey, tuple[str, str]]]:
    doc_id, parts = joined
    if parts["wanted"] and parts["text"]:
        for key in parts["wanted"]:
            yield key, (doc_id, parts["text"][0])


def _rerank_requests(joined: tuple[RowKey, dict[str, list[Any]]]) -> Iterator[Any]:
    """``(key, {first, passages})`` -> ``(key, {query, passages})`` requests; a row with no hits is done."""
    key, parts = joined
    row, reply, hits = parts["first"][0]
    texts = dict(parts["passages"])
    if not hits:
        yield beam.pvalue.TaggedOutput("done", (row, [], [reply]))
        return
    passages = [texts[doc_id] for _score, doc_id in hits]
    yield key, {"query": row.request, "passages": passages}


def _reranked(
    joined: tuple[RowKey, dict[str, list[Any]]], top_k: int, models: dict[str, str]
) -> Iterator[GeneratedRow]:
    _key, parts = joined
    if not parts["reranked"]:  # no first-stage hits: answered by _rerank_requests
        return
    row, reply, hits = parts["first"][0]
    reranked = parts["reranked"][0]
    scores = None if reranked.sample is None else reranked.sample.get("scores")
    if reranked.error is not None or scores is None or len(scores) != len(hits):
        cause = reranked.error or f"{0 if scores is None else len(scores)} scores for {len(hits)} passages"
        yield _failed(row, f"row {row.row_index} failed inference: reranking: {cause}", _info([reply, reranked]))
        return
    ordered = sorted(
        ((score, doc_id) for score, (_cosine, doc_id) in zip(scores, hits, strict=True)),
        key=lambda hit: (-hit[0], hit[1]),
    )
    yield _answered(row, ordered[:top_k], [reply, reranked], models)


class Retrieve(beam.PTransform):
    """InputRow -> GeneratedRow whose ``sample.output`` is the ranked list ``[{id, score}]`` of ``top_k``.

    Args:
        config: the run's single-target config (``target.retrieval``).
        run_id: the job (shared rate limits and budget).
        journal_dir: OUT_DIR/_responses.
        stored: the store's and journal's entries, or None.
    """

    def __init__(
        self, config: EvalConfig, run_id: str, journal_dir: str | None, stored: beam.PCollection | None
    ) -> None:
        super().__init__()
        assert config.target is not None and config.target.retrieval is not None
        self._config = config
        self._target = config.target.retrieval
        self._run_id = run_id
        self._journal_dir = journal_dir
        self._stored = stored

    def _endpoint(self, name: str) -> Endpoint:
        target, params = self._target, self._config.params
        if name == "embeddings":
            embeddings = target.embeddings
            return Endpoint(
                name, lambda key: EmbeddingsHandler(embeddings, key), embeddings, embeddings.name, params, self._run_id
            )
        reranker = target.reranker
        assert reranker is not None
        truncate = target.truncate
        return Endpoint(
            name, lambda key: RerankHandler(reranker, key, truncate), reranker, reranker.name, params, self._run_id
        )

    def expand(self, rows: beam.PCollection[InputRow]) -> beam.PCollection[GeneratedRow]:
        target = self._target
        pipeline = rows.pipeline
        embed = self._endpoint("embeddings")
        size = target.embeddings.batch_size
        block_docs = max(size, min(target.max_corpus_in_memory, _BLOCK_CAP) // size * size)
        k = target.first_stage_k if target.reranker is not None else target.top_k
        models = {"model": target.embeddings.name} | ({"reranker": target.reranker.name} if target.reranker else {})

        batches = (
            pipeline
            | "CorpusFile" >> beam.Create([corpus_path(self._config)])
            | "ReadCorpus" >> beam.FlatMap(_corpus_batches, target)
            | "SpreadBatches" >> beam.Reshuffle()
        )
        corpus = batches | "EmbedCorpus" >> CallEndpoint(embed, self._journal_dir, self._stored)
        split = rows | "QueryRequests" >> beam.ParDo(_QueryRequests(target)).with_outputs("rows", "requests", "done")
        replies = split.requests | "EmbedQueries" >> CallEndpoint(embed, self._journal_dir, self._stored)
        queries = replies | "QueryVectors" >> beam.FlatMap(_query_vector)
        hits = (
            corpus
            | "SearchBlocks" >> beam.ParDo(_SearchBlocks(k, block_docs), beam.pvalue.AsList(queries))
            | "TopK" >> beam.CombinePerKey(TopKFn(k))
        )
        first = (
            {"rows": split.rows, "replies": replies, "hits": hits}
            | "JoinFirstStage" >> beam.CoGroupByKey()
            | "FirstStage" >> beam.FlatMap(_first_stage).with_outputs("done", main="first")
        )
        done = [split.done, first.done]
        if target.reranker is None:
            answered = first.first | "Answer" >> beam.Map(_finish, target.top_k, models)
        else:
            answered, no_hits = self._rerank(first.first, batches, models)
            done.append(no_hits)
        return [*done, answered] | "AllRows" >> beam.Flatten()

    def _rerank(
        self, first: beam.PCollection, batches: beam.PCollection, models: dict[str, str]
    ) -> tuple[beam.PCollection, beam.PCollection]:
        passages = batches | "Passages" >> beam.FlatMap(_passages)
        wanted = first | "Candidates" >> beam.FlatMap(_candidates)
        texts = (
            {"wanted": wanted, "text": passages}
            | "JoinPassages" >> beam.CoGroupByKey()
            | "PassagesByRow" >> beam.FlatMap(_passages_of)
        )
        requests = (
            {"first": first, "passages": texts}
            | "JoinRerank" >> beam.CoGroupByKey()
            | "RerankRequests" >> beam.FlatMap(_rerank_requests).with_outputs("done", main="requests")
        )
        no_hits = requests.done | "NoHits" >> beam.MapTuple(
            lambda row, hits, replies: _answered(row, hits, replies, models)
        )
        reranked = requests.requests | "Rerank" >> CallEndpoint(
            self._endpoint("reranker"), self._journal_dir, self._stored
        )
        answered = (
            {"first": first, "reranked": reranked}
            | "JoinReranked" >> beam.CoGroupByKey()
            | "Reranked" >> beam.FlatMap(_reranked, self._target.top_k, models)
        )
        return answered, no_hits
