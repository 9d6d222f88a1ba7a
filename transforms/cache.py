"""The response-store stages of the target: key each row's request, join it with the store, answer the hits.

A run that consults the store (``--resume``, or a readable ``cache.path``) lists the
store's shards and the output's journal shards in the driver; ``store_join.ReadResponses``
reads them once, sequentially, as batches of lines (only the key is sliced out of each
line; no response is decoded unless a row asks for it), and ``store_join.JoinStored``
joins them with the rows' request keys in a bucketed hash join (one ``GroupByKey``):

* target (here): ``KeyRequests`` builds each row's request from its rendered prompt,
  exactly as ``GenerateSamples`` does, and keys it; ``AnswerFromStore`` turns every row whose key
  has a usable stored response into a ``GeneratedRow`` marked ``cached`` and sends the
  rest on to ``GenerateSamples``; with ``batched``, the hits of one join bucket travel on
  as one ``RowBatch`` (``transforms.row_batches``), as offline rows do, and only the misses
  one by one;
* metric calls (LLM judge, remote scorer): ``metric_cache.LookupMetricResponses``.

Nothing is loaded whole on any worker: a join bucket holds its share of the rows and of
the store, so a store of ten million entries is as good as one of ten (the work grows
with it, the memory per bucket by a few bytes an entry).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import IO, Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from beameval.cache.entry import StoredResponse
from beameval.cache.files import Files, LocalFiles, is_remote
from beameval.cache.journal import JournalWriter
from beameval.cache.key import response_key_from_content
from beameval.cache.recording import sample_from_stored
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.prompt import rendered_prompt
from beameval.core.records import GeneratedRow, InferenceInfo, InputRow
from beameval.inference.answers import answered_row
from beameval.inference.prepared import PreparedRequest, request_hash_from_bytes, wire_bytes
from beameval.inference.targets import TargetHandler, make_handler
from transforms import NAMESPACE
from transforms.row_batches import RowBatch
from transforms.store_join import BatchByBucket, JoinStored

__all__ = [
    "AnswerFromStore",
    "BeamFiles",
    "KeyRequests",
    "LookupResponses",
    "files_for",
    "journal_for",
    "request_keys",
    "target_request",
]


class BeamFiles:
    """``beameval.cache.files.Files`` on Beam's ``FileSystems`` (local, ``gs://``, ``s3://``)."""

    def join(self, base: str, *parts: str) -> str:
        return FileSystems.join(base, *parts)

    def create(self, path: str) -> IO[bytes]:
        return FileSystems.create(path)  # type: ignore[return-value]  # a BufferedWriter-like stream

    def open(self, path: str) -> IO[bytes]:
        return FileSystems.open(path)  # type: ignore[return-value]

    def match(self, pattern: str) -> list[str]:
        try:
            found = FileSystems.match([pattern])[0].metadata_list
        except Exception:  # noqa: BLE001 - a missing folder is "no shards" on every file system
            return []
        return sorted(m.path for m in found if not m.path.endswith("/"))

    def exists(self, path: str) -> bool:
        return bool(FileSystems.exists(path))

    def delete(self, paths: list[str]) -> None:
        if paths:
            FileSystems.delete(paths)


def files_for(path: str) -> Files:
    """Plain local files for a local path (flushes reach the OS at once), Beam's file systems for a URL."""
    return BeamFiles() if is_remote(path) else LocalFiles()


def journal_for(directory: str) -> JournalWriter:
    """This worker process's journal writer for ``directory``."""
    return JournalWriter.shared(directory, files_for(directory))


def target_request(handler: TargetHandler, row: InputRow) -> PreparedRequest:
    """Build a row's target request as ``GenerateSamples`` does: prepare from the rendered prompt, set the sample index.

    Raises:
        EvaluatorError: the prompt did not render or the handler refuses it.

    """
    assert row.item is not None
    prepared = handler.prepare(rendered_prompt(row), row.item)
    if row.sample_index:
        prepared = PreparedRequest(prepared.url, prepared.body, prepared.headers, row.sample_index)
    return prepared


def request_keys(prepared: PreparedRequest, secrets: tuple[str, ...] = ()) -> tuple[bytes, str]:
    """A request's raw response key and its ``request_hash``, from one serialisation of the body.

    Equal to ``bytes.fromhex(prepared_key(prepared, secrets=secrets))`` and ``request_hash(prepared)``
    (tested); the key's layout is ``beameval.cache.key``'s, headers but credentials included.

    Raises:
        TypeError: the body holds a value with no JSON form.
        ValueError: the body holds NaN or Infinity.

    """
    content = wire_bytes(prepared)
    key = response_key_from_content(prepared.url, content, prepared.sample_index, prepared.headers, secrets)
    return bytes.fromhex(key), request_hash_from_bytes(prepared.url, content)


_Joined = tuple[tuple[str | None, InputRow], StoredResponse | None]


class _TargetRequests(beam.DoFn):
    """A DoFn that builds or parses the target's requests: the config and, once set up, its handler."""

    def __init__(self, config: EvalConfig) -> None:
        self._config = config

    def setup(self) -> None:
        config = self._config
        assert config.target is not None
        self._handler = make_handler(config.target, config.params, None)  # builds and parses only: no key needed


class KeyRequests(_TargetRequests):
    """InputRow -> ``(raw key, (request_hash, row))``.

    A row with no request (it failed to read, its prompt did not render) gets the key
    None, which no stored entry has, so it comes out of the join as a miss and
    ``GenerateSamples`` reports it as it always does: no second path is needed.
    """

    def process(self, row: InputRow) -> Iterator[tuple[bytes | None, tuple[str | None, InputRow]]]:
        if row.failure is None and row.item is not None:
            try:
                prepared = target_request(self._handler, row)
                key, digest = request_keys(prepared)
            except (EvaluatorError, TypeError, ValueError):  # GenerateSamples fails the row with the full message
                pass
            else:
                row = dataclasses.replace(row, request=wire_bytes(prepared).decode("utf-8"))  # the rows/ column
                yield key, (digest, row)
                return
        yield None, (None, row)


class AnswerFromStore(_TargetRequests):
    """``((request_hash, row), stored or None)`` -> a cached ``GeneratedRow`` if the stored reply parses, else the row.

    ``GenerateSamples`` passes the GeneratedRows through and sends the InputRows. A list of
    such pairs (a join bucket, ``JoinStored(batched=True)``) gives one ``RowBatch`` of its
    hits and each miss on its own.
    """

    def setup(self) -> None:
        super().setup()
        self._hits = Metrics.counter(NAMESPACE, "cache_hits")
        self._misses = Metrics.counter(NAMESPACE, "cache_misses")

    def process(self, joined: _Joined | list[_Joined]) -> Iterator[InputRow | GeneratedRow | RowBatch]:
        if not isinstance(joined, list):
            yield self._answer(joined)
            return
        hits = RowBatch()
        for pair in joined:
            answered = self._answer(pair)
            if isinstance(answered, GeneratedRow):
                hits.append(answered)
            else:
                yield answered
        if hits:
            yield hits

    def _answer(self, joined: _Joined) -> InputRow | GeneratedRow:
        (digest, row), stored = joined
        sample = sample_from_stored(self._handler, stored)
        if sample is None:
            self._misses.inc()
            return row
        self._hits.inc()
        info = InferenceInfo(attempts=0, http_status=200, request_hash=digest, cached=True)
        return answered_row(row, sample, info)  # exactly what a fresh answer goes through


class LookupResponses(beam.PTransform):
    """InputRow -> cached ``GeneratedRow``s for the hits and the ``InputRow``s still to send, in one PCollection.

    Args:
        config: the run's config (target and prompt).
        stored: the store's and journal's entries (``store_join.ReadResponses``).
        batched: the hits travel as ``RowBatch`` lists (every stage after this one takes them).
    """

    def __init__(self, config: EvalConfig, stored: beam.PCollection[Any], batched: bool = False) -> None:
        super().__init__()
        self._config = config
        self._stored = stored
        self._batched = batched

    def expand(self, rows: beam.PCollection[InputRow]) -> beam.PCollection[Any]:
        return (
            rows
            | "KeyRequests" >> beam.ParDo(KeyRequests(self._config))
            | "Batch" >> beam.ParDo(BatchByBucket())
            | "JoinResponses" >> JoinStored(self._stored, self._batched)
            | "AnswerFromStore" >> beam.ParDo(AnswerFromStore(self._config))
        )
