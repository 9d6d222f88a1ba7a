"""The response-store stages of the target: key each row's request, join it with the store, answer the hits.

A run that consults the store (``--resume``, or a readable ``cache.path``) lists the
store's shards and the output's journal shards in the driver; ``store_join.ReadResponses``
reads them once, sequentially, as batches of lines (only the key is sliced out of each
line; no response is decoded unless a row asks for it), and ``store_join.JoinStored``
joins them with the rows' request keys in a bucketed hash join (one ``GroupByKey``):

* target (here): ``KeyRequests`` builds each row's request from its rendered prompt,
  exactly as ``GenerateSamples`` does, and keys it; ``AnswerFromStore`` turns every row whose key
  has a usable stored response into a ``GeneratedRow`` marked ``cached`` and sends the
  rest on to ``GenerateSamples``; with ``batched``, the hits of one join batch leave by the
  ``STORED`` output as one ``StoredHits``, past generation and its checkpoint, and ``AnswerHits``
  makes them one ``RowBatch`` (``transforms.row_batches``) for scoring, as offline rows travel;
* metric calls (LLM judge, remote scorer): ``metric_cache.LookupMetricResponses``.

Nothing is loaded whole on any worker: a join bucket holds its share of the rows and of
the store, so a store of ten million entries is as good as one of ten (the work grows
with it, the memory per bucket by a few bytes an entry).
"""

from __future__ import annotations

import dataclasses
import marshal
import operator
import pickle
from collections.abc import Iterator
from typing import IO, Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from beameval.cache.entry import StoredResponse, pack_bytes, unpack_bytes
from beameval.cache.files import Files, LocalFiles, is_remote
from beameval.cache.journal import JournalWriter
from beameval.cache.key import response_digest
from beameval.cache.recording import clean_replies, sample_from_stored
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.prompt import render_prompt, rendered_prompt
from beameval.core.records import GeneratedRow, InferenceInfo, InputRow
from beameval.core.templates import Template
from beameval.inference.answers import answered_row
from beameval.inference.prepared import PreparedRequest, request_hash_from_bytes, wire_bytes
from beameval.inference.targets import TargetHandler, make_handler
from transforms import NAMESPACE
from transforms.row_batches import RowBatch
from transforms.store_join import BatchByBucket, JoinedBatch, JoinStored
from transforms.worker_gc import freeze_startup_heap

__all__ = [
    "STORED",
    "AnswerFromStore",
    "AnswerHits",
    "StoredHits",
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
    key, digest, _content = _keyed(prepared, secrets)
    return key, digest


def _keyed(prepared: PreparedRequest, secrets: tuple[str, ...] = ()) -> tuple[bytes, str, bytes]:
    """``request_keys`` and the body as sent (the ``request`` column): one serialisation for all three."""
    content = wire_bytes(prepared)
    key = response_digest(prepared.url, content, prepared.sample_index, prepared.headers, secrets)
    return key, request_hash_from_bytes(prepared.url, content), content


#: The tagged output of ``AnswerFromStore`` with ``batched``: one ``StoredHits`` per join batch.
STORED = "stored"

#: A row crosses the join as the tuple of its fields (``InputRow(*fields)`` again): a tuple pickles
#: in about half the time of the dataclass, and every row is pickled into the join.
_ROW_FIELDS = tuple(field.name for field in dataclasses.fields(InputRow))
_row_fields = operator.attrgetter(*_ROW_FIELDS)
_REQUEST = _ROW_FIELDS.index("request")
#: A row with a request crosses without its rendered prompt (a miss renders it again to send it).
_PROMPT = _ROW_FIELDS.index("prompt")

#: A row keyed for the join: ``(raw key or None, (request_hash or None, the row's fields))``.
_Keyed = tuple[bytes | None, tuple[str | None, tuple[Any, ...]]]
_Joined = tuple[tuple[str | None, tuple[Any, ...]], StoredResponse | None]


@dataclasses.dataclass(frozen=True, slots=True)
class StoredHits:
    """One join batch's hits on their way past generation to scoring, as cheap to carry as they come.

    The local runner holds every hit encoded until scoring reads them. A batch whose every
    request hit (every batch of a fully cached rerun) keeps its rows exactly as they crossed
    the join, compressed and never unpacked on the way (``store_join.JoinedBatch``); only a
    batch that mixes hits and misses packs its hits' rows again.

    The parsed replies are written with ``marshal``: a reply parsed from a stored entry is
    made of JSON's types only (dict, list, str, int, float, bool, None: what a JSON decoder
    returns and the handlers' ``parse`` builds from it), which marshal writes and reads back
    exactly, lone surrogates included, in less than half of pickle's time both ways.
    Replies marshal refuses are pickled. A row's fields hold the dataset's own values
    (dates, decimals, NumPy values), which marshal would refuse or, for a buffer, turn into
    bytes: those are pickled, as they crossed the join.

    Attributes:
        rows: ``pack_bytes`` of the pickled ``(request_hash, row fields)`` of each hit.
        replies: ``pack_bytes`` of the parsed replies, in the same order.
        marshalled: ``replies`` was written by marshal (else by pickle).
        clean: every reply is known to hold no lone surrogate and to nest within the limit
            (``clean_replies``), so the rows are built without looking again.
    """

    rows: bytes
    replies: bytes
    marshalled: bool
    clean: bool = False

    @classmethod
    def of(cls, rows: bytes, replies: list[dict[str, Any]], clean: bool = False) -> StoredHits:
        """The hits of ``rows`` (packed as ``BatchByBucket`` packs values) with their parsed replies."""
        try:
            return cls(rows, pack_bytes(marshal.dumps(replies)), True, clean)
        except ValueError:  # a type marshal does not write (or a value nested too deep)
            return cls(rows, pack_bytes(pickle.dumps(replies, pickle.HIGHEST_PROTOCOL)), False, clean)

    def hits(self) -> Iterator[tuple[str, dict[str, Any], tuple[Any, ...]]]:
        """``(request_hash, parsed reply, row fields)`` for each hit."""
        rows = pickle.loads(unpack_bytes(self.rows))  # noqa: S301 - this run's own rows
        data = unpack_bytes(self.replies)
        replies = marshal.loads(data) if self.marshalled else pickle.loads(data)  # noqa: S301 - likewise
        for (digest, fields), reply in zip(rows, replies, strict=True):
            yield digest, reply, fields


class _TargetRequests(beam.DoFn):
    """A DoFn that builds or parses the target's requests: the config and, once set up, its handler."""

    def __init__(self, config: EvalConfig) -> None:
        self._config = config

    def setup(self) -> None:
        config = self._config
        assert config.target is not None
        self._handler = make_handler(config.target, config.params, None)  # builds and parses only: no key needed
        self._template = Template(config.prompt_template, "prompt_template") if config.prompt_template else None
        # Every row of the run passes here, in a stage that runs before scoring's (which would freeze it too).
        freeze_startup_heap()


class KeyRequests(_TargetRequests):
    """InputRow -> ``(raw key, (request_hash, row's fields))``; a ``RowBatch`` of rows -> one ``RowBatch`` of those.

    A row with no request (it failed to read, its prompt did not render) gets the key
    None, which no stored entry has, so it comes out of the join as a miss and
    ``GenerateSamples`` reports it as it always does: no second path is needed. A row with
    a request leaves its rendered prompt behind (the request holds it; ``AnswerFromStore``
    renders a miss's again): a quarter less to pickle, compress and read back per row.
    """

    def process(self, element: InputRow | RowBatch) -> Iterator[_Keyed | RowBatch]:
        if isinstance(element, list):  # a batch stays one element: Beam's hand-over is paid once for its rows
            yield RowBatch([self._keyed(row) for row in element])
        else:
            yield self._keyed(element)

    def _keyed(self, row: InputRow) -> _Keyed:
        if row.failure is None and row.item is not None:
            try:
                key, digest, content = _keyed(target_request(self._handler, row))
            except (EvaluatorError, TypeError, ValueError):  # GenerateSamples fails the row with the full message
                pass
            else:
                fields = list(_row_fields(row))  # with the request as sent (the rows/ column), the input as it is
                fields[_REQUEST], fields[_PROMPT] = content.decode("utf-8"), None
                return key, (digest, tuple(fields))
        return None, (None, _row_fields(row))


class AnswerFromStore(_TargetRequests):
    """``((request_hash, row), stored or None)`` -> a cached ``GeneratedRow`` if the stored reply parses, else the row.

    ``GenerateSamples`` passes the GeneratedRows through and sends the InputRows. A join
    batch (``JoinStored(batched=True)``) gives each miss on its own and its hits as one
    ``StoredHits`` on the ``STORED`` output, still parsed replies (``AnswerHits``).
    """

    def setup(self) -> None:
        super().setup()
        self._hits = Metrics.counter(NAMESPACE, "cache_hits")
        self._misses = Metrics.counter(NAMESPACE, "cache_misses")

    def process(self, joined: _Joined | JoinedBatch) -> Iterator[Any]:
        if not isinstance(joined, JoinedBatch):
            (digest, fields), stored = joined
            sample = sample_from_stored(self._handler, stored)
            (self._misses if sample is None else self._hits).inc()
            yield self._to_send(digest, fields) if sample is None else _answered(digest, sample, InputRow(*fields))
            return
        samples = [sample_from_stored(self._handler, stored) for stored in joined.entries]
        replies = [sample for sample in samples if sample is not None]
        if len(replies) == len(samples):  # every request hit: the rows go on as they crossed the join
            self._hits.inc(len(replies))
            clean = clean_replies(self._handler, joined.entries)
            yield beam.pvalue.TaggedOutput(STORED, StoredHits.of(joined.values, replies, clean))
            return
        hits = []
        for (digest, fields), sample in zip(pickle.loads(unpack_bytes(joined.values)), samples, strict=True):  # noqa: S301
            if sample is None:
                yield self._to_send(digest, fields)
            else:
                hits.append((digest, fields))
        if hits:
            rows = pack_bytes(pickle.dumps(hits, pickle.HIGHEST_PROTOCOL))
            answered = [entry for entry, sample in zip(joined.entries, samples, strict=True) if sample is not None]
            clean = clean_replies(self._handler, answered)
            yield beam.pvalue.TaggedOutput(STORED, StoredHits.of(rows, replies, clean))
            self._hits.inc(len(hits))
        self._misses.inc(len(samples) - len(hits))

    def _to_send(self, digest: str | None, fields: tuple[Any, ...]) -> InputRow:
        """A miss as ``GenerateSamples`` takes it: a row that has a request gets its prompt again (``KeyRequests``)."""
        row = InputRow(*fields)
        return row if digest is None else render_prompt(self._template, row)


class AnswerHits(beam.DoFn):
    """``StoredHits`` -> one ``RowBatch`` of cached GeneratedRows; a sent row -> a batch of one.

    Every element out is a ``RowBatch``, so the PCollection (and scoring's) can be typed so
    and Beam sizes its sampled elements from one row (``RowBatchCoder``), not by pickling
    the whole batch.
    """

    def process(self, element: GeneratedRow | StoredHits) -> Iterator[RowBatch]:
        if not isinstance(element, StoredHits):
            yield RowBatch([element])
            return
        clean, hits = element.clean, element.hits()
        yield RowBatch([_answered(digest, sample, InputRow(*fields), clean) for digest, sample, fields in hits])


def _answered(digest: str | None, sample: dict[str, Any], row: InputRow, known_clean: bool = False) -> GeneratedRow:
    info = InferenceInfo(attempts=0, http_status=200, request_hash=digest, cached=True)
    return answered_row(row, sample, info, known_clean)  # exactly what a fresh answer goes through


class LookupResponses(beam.PTransform):
    """InputRow -> cached ``GeneratedRow``s for the hits and the ``InputRow``s still to send, in one PCollection.

    With ``batched``, the outputs instead: ``misses`` (the InputRows to send) and ``STORED``
    (``StoredHits``, for ``AnswerHits`` after the generation checkpoint).

    Args:
        config: the run's config (target and prompt).
        stored: the store's and journal's entries (``store_join.ReadResponses``).
        batched: the hits travel in batches (every stage after generation takes row batches).
        rows_in_batches: the rows arrive as ``RowBatch`` lists and are keyed a batch at a time.
    """

    def __init__(
        self, config: EvalConfig, stored: beam.PCollection[Any], batched: bool = False, rows_in_batches: bool = False
    ) -> None:
        super().__init__()
        self._config = config
        self._stored = stored
        self._batched = batched
        self._rows_in_batches = rows_in_batches

    def expand(self, rows: beam.PCollection[InputRow]) -> Any:
        answer = beam.ParDo(AnswerFromStore(self._config))
        key = beam.ParDo(KeyRequests(self._config))
        return (
            rows
            | "KeyRequests" >> (key.with_output_types(RowBatch) if self._rows_in_batches else key)
            | "Batch" >> beam.ParDo(BatchByBucket())
            | "JoinResponses" >> JoinStored(self._stored, self._batched)
            | "AnswerFromStore" >> (answer.with_outputs(STORED, main="misses") if self._batched else answer)
        )
