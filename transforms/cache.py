"""The response-store stages: read stored responses, key each request, join, and answer hits without sending.

A run that consults the store (``--resume``, or a readable ``cache.path``) lists the
store's shards and the output's journal shards in the driver, reads them as a
PCollection of ``(key, line)`` (``ReadResponses``: only the key is sliced out of each
line; no response is decoded unless a row asks for it), and joins it with the rows'
request keys by ``CoGroupByKey``:

* target: ``KeyRequests`` renders each row's prompt and builds its request, exactly as
  ``GenerateSamples`` would, and keys it; ``AnswerFromStore`` turns every row whose key
  has a usable stored response into a ``GeneratedRow`` marked ``cached`` and sends the
  rest on to ``GenerateSamples``;
* metric calls (LLM judge, remote scorer): ``LookupMetricResponses`` keys each row's
  endpoint-metric requests, joins them the same way, and puts the hits into the row's
  ``metric_responses`` before ``CallMetricEndpoints``, which sends only what is missing.

Nothing is loaded whole on any worker: memory goes with the rows, and the store is read
once per run as a stream of lines, so a store of ten million entries is as good as one of
ten (the work grows with it, the memory does not).
"""

from __future__ import annotations

import dataclasses
import pickle
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from beameval.cache.entry import choose, iter_lines, line_key
from beameval.cache.files import Files, LocalFiles, is_remote
from beameval.cache.journal import JournalWriter
from beameval.cache.key import prepared_key
from beameval.cache.recording import sample_from_stored
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.records import EndpointReply, GeneratedRow, InferenceInfo, InputRow
from beameval.core.scoring import metric_keys
from beameval.core.templates import Template
from beameval.inference.prepared import PreparedRequest, request_hash
from beameval.inference.targets import TargetHandler, make_handler
from beameval.metrics.base import EndpointMetric, MetricConfig, MetricContext
from beameval.metrics.registry import metric_class, resolve
from transforms import NAMESPACE

__all__ = [
    "UNKEYED",
    "AnswerFromStore",
    "BeamFiles",
    "KeyRequests",
    "LookupMetricResponses",
    "LookupResponses",
    "ReadResponses",
    "endpoint_metrics",
    "files_for",
    "journal_for",
    "target_request",
]

UNKEYED = "unkeyed"


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

    def copy(self, source: str, destination: str) -> None:
        FileSystems.copy([source], [destination])

    def delete(self, paths: list[str]) -> None:
        if paths:
            FileSystems.delete(paths)


def files_for(path: str) -> Files:
    """Plain local files for a local path (flushes reach the OS at once), Beam's file systems for a URL."""
    return BeamFiles() if is_remote(path) else LocalFiles()


def journal_for(directory: str) -> JournalWriter:
    """This worker process's journal writer for ``directory``."""
    return JournalWriter.shared(directory, files_for(directory))


def target_request(prompt: Template | None, handler: TargetHandler, row: InputRow) -> PreparedRequest:
    """Build a row's target request as ``GenerateSamples`` does: render the prompt, prepare, set the sample index.

    Raises:
        EvaluatorError: the prompt does not render or the handler refuses it.

    """
    assert row.item is not None
    rendered = prompt.render({**row.item, "item": row.item}) if prompt else row.item
    prepared = handler.prepare(rendered, row.item)
    if row.sample_index:
        prepared = PreparedRequest(prepared.url, prepared.body, prepared.headers, row.sample_index)
    return prepared


def _read_shard(path: str) -> Iterator[tuple[bytes, bytes]]:
    with FileSystems.open(path) as stream:
        for line in iter_lines(stream):
            key = line_key(line)
            if key is not None:
                yield bytes.fromhex(key), zlib.compress(line, 1)


class ReadResponses(beam.PTransform):
    """The entries of the given shard files as ``(key digest, line)``; torn lines and other key versions are skipped.

    Keys travel as their 32 raw bytes and lines undecoded, and rows travel pickled
    (``KeyRequests``): a local runner's shuffle holds each as one small object.

    Args:
        shards: the files to read, listed by the driver when the run starts (a shard that
            appears later, such as this run's own journal, is not read).
    """

    def __init__(self, shards: Sequence[str]) -> None:
        super().__init__()
        self._shards = list(shards)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[tuple[bytes, bytes]]:
        return (
            pbegin
            | "Shards" >> beam.Create(self._shards)
            | "Spread" >> beam.Reshuffle()
            | "Lines" >> beam.FlatMap(_read_shard)
        )


class KeyRequests(beam.DoFn):
    """InputRow -> ``(key digest, packed (request_hash, row))``.

    A row with no request (it failed to read, its prompt does not render) gets a key no
    stored entry has, so it comes out of the join as a miss and ``GenerateSamples``
    reports it as it always does; no second path (and no Flatten, which a local runner
    materialises) is needed.
    """

    def __init__(self, config: EvalConfig) -> None:
        self._config = config

    def setup(self) -> None:
        config = self._config
        assert config.target is not None
        self._handler = make_handler(config.target, config.params, None)  # builds and parses only: no key needed
        self._prompt = Template(config.prompt_template, "prompt_template") if config.prompt_template else None

    def process(self, row: InputRow) -> Iterator[tuple[bytes, bytes]]:
        key = digest = None
        if row.failure is None and row.item is not None:
            try:
                prepared = target_request(self._prompt, self._handler, row)
                key, digest = bytes.fromhex(prepared_key(prepared)), request_hash(prepared)
            except (EvaluatorError, TypeError, ValueError):  # GenerateSamples fails the row with the full message
                pass
        if key is None:
            key = f"{UNKEYED}/{row.row_index}/{row.sample_index}".encode()
        yield key, _pack((digest, row))


def _pack(value: Any) -> bytes:
    """One compact bytes object per shuffled value: a local runner's shuffle keeps every value in memory."""
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def _unpack(packed: bytes) -> Any:
    return pickle.loads(zlib.decompress(packed))


class AnswerFromStore(beam.DoFn):
    """A joined key -> a cached ``GeneratedRow`` per row when a stored response parses, else its ``InputRow``s.

    ``GenerateSamples`` passes the GeneratedRows through and sends the InputRows.
    """

    def __init__(self, config: EvalConfig) -> None:
        self._config = config

    def setup(self) -> None:
        config = self._config
        assert config.target is not None
        self._handler = make_handler(config.target, config.params, None)  # builds and parses only: no key needed
        self._hits = Metrics.counter(NAMESPACE, "cache_hits")
        self._misses = Metrics.counter(NAMESPACE, "cache_misses")

    def process(self, joined: tuple[bytes, dict[str, Iterable[Any]]]) -> Iterator[Any]:
        _key, groups = joined
        rows = list(groups["rows"])  # none: a stored response no row of this run asks for
        sample = sample_from_stored(self._handler, choose(map(zlib.decompress, groups["stored"]))) if rows else None
        for digest, row in map(_unpack, rows):
            if sample is None:
                self._misses.inc()
                yield row
                continue
            self._hits.inc()
            prompt_tokens, completion_tokens = _usage(sample)
            info = InferenceInfo(
                attempts=0,
                http_status=200,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                request_hash=digest,
                cached=True,
            )
            yield GeneratedRow(row.row_index, row.item, sample, inference=info, sample_index=row.sample_index)


def _usage(sample: dict[str, Any]) -> tuple[int | None, int | None]:
    """The token counts a stored reply reported (shown in ``rows/``; a hit is not billed in ``usage``)."""
    usage = sample.get("usage")
    if not isinstance(usage, dict):
        return None, None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else None), (completion if isinstance(completion, int) else None)


def endpoint_metrics(configs: Sequence[MetricConfig]) -> list[tuple[str, EndpointMetric[Any]]]:
    """The run's endpoint metrics (LLM judge, remote) with their metric keys, freshly built."""
    found = []
    for key, config in zip(metric_keys(configs), configs, strict=True):
        if issubclass(metric_class(config.type), EndpointMetric):
            metric = resolve(config, key)
            assert isinstance(metric, EndpointMetric)
            found.append((key, metric))
    return found


def row_token(row: GeneratedRow) -> str:
    """A row's identity in the metric join: ``row_index/sample_index``."""
    return f"{row.row_index}/{row.sample_index}"


class _KeyMetricRequests(beam.DoFn):
    """GeneratedRow -> ``(token, row)``, and ``(key, (token, metric key))`` on ``requests`` per endpoint metric."""

    def __init__(self, configs: Sequence[MetricConfig]) -> None:
        self._configs = list(configs)

    def setup(self) -> None:
        self._endpoints = endpoint_metrics(self._configs)

    def process(self, row: GeneratedRow) -> Iterator[Any]:
        token = row_token(row)
        yield token, row
        failed = row.failure is not None or row.item is None
        ctx = MetricContext(row.item or {}, row.sample)
        for metric_key, metric in () if failed else self._endpoints:
            try:
                key = prepared_key(metric.build_request(ctx), row.sample_index)
            except Exception:  # noqa: BLE001 - CallMetricEndpoints builds it again and reports the failure
                continue
            yield beam.pvalue.TaggedOutput("requests", (bytes.fromhex(key), (token, metric_key)))


def _stored_for_requests(joined: tuple[bytes, dict[str, Iterable[Any]]]) -> Iterator[tuple[str, tuple[str, Any]]]:
    """A joined metric-request key -> ``(token, (metric key, stored response))`` for each row that asked."""
    _key, groups = joined
    requests = list(groups["requests"])
    if not requests:
        return
    best = choose(map(zlib.decompress, groups["stored"]))
    if best is None:
        return
    for token, metric_key in requests:
        yield token, (metric_key, best)


class _AttachMetricHits(beam.DoFn):
    """``(token, {row, hits})`` -> the row, with a cached ``EndpointReply`` for every hit that parses."""

    def __init__(self, configs: Sequence[MetricConfig]) -> None:
        self._configs = list(configs)

    def setup(self) -> None:
        self._handlers = {key: metric.endpoint_handler() for key, metric in endpoint_metrics(self._configs)}
        self._hits = Metrics.counter(NAMESPACE, "metric_cache_hits")

    def process(self, joined: tuple[str, dict[str, Iterable[Any]]]) -> Iterator[GeneratedRow]:
        _token, groups = joined
        for row in groups["row"]:
            replies = dict(row.metric_responses or {})
            for metric_key, stored in groups["hits"]:
                sample = sample_from_stored(self._handlers[metric_key], stored)
                if sample is None:
                    continue
                prompt_tokens, completion_tokens = _usage(sample)
                replies[metric_key] = EndpointReply(
                    sample=sample,
                    status=200,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    cached=True,
                )
                self._hits.inc()
            yield dataclasses.replace(row, metric_responses=replies) if replies else row


class LookupMetricResponses(beam.PTransform):
    """GeneratedRow -> the same rows, with the stored replies of their endpoint-metric requests filled in.

    Args:
        configs: every metric config of the run, in config order.
        stored: the ``(key, line)`` entries of the store and journal (``ReadResponses``).
    """

    def __init__(self, configs: Sequence[MetricConfig], stored: beam.PCollection[tuple[bytes, bytes]]) -> None:
        super().__init__()
        self._configs = list(configs)
        self._stored = stored

    def expand(self, rows: beam.PCollection[GeneratedRow]) -> beam.PCollection[GeneratedRow]:
        keyed = rows | "KeyMetricRequests" >> beam.ParDo(_KeyMetricRequests(self._configs)).with_outputs(
            "requests", main="rows"
        )
        hits = (
            {"requests": keyed.requests, "stored": self._stored}
            | "JoinMetricResponses" >> beam.CoGroupByKey()
            | "StoredForRequests" >> beam.FlatMap(_stored_for_requests)
        )
        return (
            {"row": keyed.rows, "hits": hits}
            | "JoinRows" >> beam.CoGroupByKey()
            | "AttachHits" >> beam.ParDo(_AttachMetricHits(self._configs))
        )


class LookupResponses(beam.PTransform):
    """InputRow -> cached ``GeneratedRow``s for the hits and the ``InputRow``s still to send, in one PCollection.

    Args:
        config: the run's config (target and prompt).
        stored: the ``(key, line)`` entries of the store and journal (``ReadResponses``).
    """

    def __init__(self, config: EvalConfig, stored: beam.PCollection[tuple[bytes, bytes]]) -> None:
        super().__init__()
        self._config = config
        self._stored = stored

    def expand(self, rows: beam.PCollection[InputRow]) -> beam.PCollection[Any]:
        keyed = rows | "KeyRequests" >> beam.ParDo(KeyRequests(self._config))
        return (
            {"rows": keyed, "stored": self._stored}
            | "JoinResponses" >> beam.CoGroupByKey()
            | "AnswerFromStore" >> beam.ParDo(AnswerFromStore(self._config))
        )
