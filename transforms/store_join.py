"""The keyed join of requests with the response store: a bucketed hash join on one GroupByKey.

Both sides are cut into ``BUCKETS`` buckets by their key (``entry.bucket_of``) and travel
in batches: the store side as ``entry.pack_lines`` batches of its shards' lines (read
once, sequentially, each shard by one worker), the request side likewise: the raw keys
side by side and the values pickled and compressed together. One ``GroupByKey`` on the
bucket brings a bucket's batches together, and the probe answers each request of the
bucket with the entry ``choose`` picks among its key's lines (or None: a miss), reading
only keys: the values cross unopened, for the consumer to unpack (``JoinedBatch``).

Why batches, and not a ``CoGroupByKey`` on each key: a local runner's shuffle
(FnApiRunner's ``GroupingBuffer``) keeps every value as a Python object and then a second,
encoded copy of everything, so with one value per row and one per stored line a million
cached rows took 3 GiB. Batches of a few hundred compress to a fraction of their parts
(rows of one dataset and replies of one model repeat their field names and most of their
text), and cost one object each. Nothing is loaded whole anywhere: a bucket holds about
``1/BUCKETS`` of the rows and of the store, and on Dataflow a 10-million-entry store is
40,000 entries a bucket, only the wanted ones decompressed.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from beameval.cache.entry import (
    KEY_BYTES,
    StoredResponse,
    bucket_of,
    choose,
    iter_lines,
    line_raw_key,
    pack_bytes,
    pack_lines,
    unpack_bytes,
)
from beameval.cache.entry import wanted_lines as find_lines
from beameval.cache.store import SHARD_PATTERN, successors

__all__ = ["BUCKETS", "BatchByBucket", "JoinStored", "JoinedBatch", "ReadResponses"]

#: Join buckets: enough to spread over every worker, few enough that each batch holds hundreds of entries.
BUCKETS = 256
#: Entries buffered (over all buckets) before every bucket's batch is sent on.
FLUSH_AT = 32_768

_REQUESTS, _STORED = 0, 1  # which side a batch comes from
#: The tagged output of the shards that were deleted between the listing and the read.
GONE = "gone"
#: The key a request with none (a row that failed before it had a request) crosses the join under:
#: excluded from the look-up, so it comes out a miss (a SHA-256 key equal to it would only miss too).
NO_KEY = b"\xff" * KEY_BYTES
#: Rounds of looking for the shards that replaced deleted ones (a compaction during a compaction's aftermath).
_SUCCESSOR_ROUNDS = 3


class JoinedBatch(NamedTuple):
    """One request batch out of the join: its values as ``BatchByBucket`` packed them, and each one's entry.

    Attributes:
        values: ``pack_bytes`` of the pickled values, in the batch's order.
        entries: the entry ``choose`` picked for each value's key, or None (a miss).
    """

    values: bytes
    entries: list[StoredResponse | None]


class _ShardGone(Exception):
    """A listed shard was deleted before it was read (``pipeline.cache compact`` or ``prune`` meanwhile)."""


def _read_shard(path: str) -> Iterator[tuple[int, tuple[int, bytes, bytes]]]:
    keys: list[list[bytes]] = [[] for _ in range(BUCKETS)]
    lines: list[list[bytes]] = [[] for _ in range(BUCKETS)]
    held = 0
    try:
        stream = FileSystems.open(path)
    except Exception as exc:  # noqa: BLE001 - every file system says "not found" its own way
        if FileSystems.exists(path):
            raise
        raise _ShardGone(path) from exc
    with stream:
        for line in iter_lines(stream):
            raw = line_raw_key(line)
            if raw is None:  # a torn line, another key version: skipped
                continue
            bucket = bucket_of(raw, BUCKETS)
            keys[bucket].append(raw)
            lines[bucket].append(line)
            held += 1
            if held >= FLUSH_AT:
                yield from _line_batches(keys, lines)
                held = 0
    yield from _line_batches(keys, lines)


def _line_batches(keys: list[list[bytes]], lines: list[list[bytes]]) -> Iterator[tuple[int, tuple[int, bytes, bytes]]]:
    for bucket in range(BUCKETS):
        if keys[bucket]:
            yield bucket, (_STORED, *pack_lines(keys[bucket], lines[bucket]))
            keys[bucket], lines[bucket] = [], []


class _ReadShards(beam.DoFn):
    """A shard path -> its batches; a shard deleted since it was listed goes to the ``GONE`` output."""

    def process(self, path: str) -> Iterator[Any]:
        try:
            yield from _read_shard(path)
        except _ShardGone:
            yield beam.pvalue.TaggedOutput(GONE, path)


def _read_successors(
    all_gone: tuple[None, Iterable[str]], listed: list[str]
) -> Iterator[tuple[int, tuple[int, bytes, bytes]]]:
    """The batches of the shards that replaced the ``gone`` ones (``store.successors``), read on one worker.

    Only a compaction or prune during the run gets here, so the shards it wrote are read
    sequentially; one deleted again meanwhile sends the search round once more.
    """
    gone = list(all_gone[1])
    seen = list(listed)
    for _ in range(_SUCCESSOR_ROUNDS):
        if not gone:
            return
        found = successors(_list_shards, seen, gone)
        seen += found
        gone = []
        for path in found:
            try:
                yield from _read_shard(path)
            except _ShardGone:
                gone.append(path)


def _list_shards(folder: str) -> list[str]:
    """The shards in ``folder`` now, on any file system; [] when the folder is gone too."""
    try:
        found = FileSystems.match([FileSystems.join(folder, SHARD_PATTERN)])[0].metadata_list
    except Exception:  # noqa: BLE001 - a missing folder is "no shards" on every file system
        return []
    return [m.path for m in found]


class ReadResponses(beam.PTransform):
    """The entries of the given shard files as ``(bucket, batch)``; torn lines and other key versions are skipped.

    A shard that ``compact`` or ``prune`` deletes between the listing and its read is
    replaced by the shards they wrote before deleting it (``store.successors``), so the
    run still finds every entry.

    Args:
        shards: the files to read, listed by the driver when the run starts (a shard that
            appears later, such as this run's own journal, is not read).
    """

    def __init__(self, shards: Sequence[str]) -> None:
        super().__init__()
        self._shards = list(shards)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[tuple[int, tuple[int, bytes, bytes]]]:
        read = (
            pbegin
            | "Shards" >> beam.Create(self._shards)  # spread over the workers (Create reshuffles more than one)
            | "Lines" >> beam.ParDo(_ReadShards()).with_outputs(GONE, main="lines")
        )
        # One group of every deleted shard (a compaction replaces many with one): none, and nothing runs.
        replaced = (
            read[GONE]
            | "Gone" >> beam.WithKeys(None)
            | "AllGone" >> beam.GroupByKey()
            | "Successors" >> beam.FlatMap(_read_successors, self._shards)
        )
        return (read["lines"], replaced) | "AllLines" >> beam.Flatten()


class BatchByBucket(beam.DoFn):
    """``(raw key or None, value)``, or a list of them -> ``(bucket, request batch)``.

    Batches are flushed every ``FLUSH_AT`` pairs and at bundle end. A None key (a row with
    no request) never hits; it is spread by its position in the bundle so that it still
    comes out of the join, as a miss.
    """

    def start_bundle(self) -> None:
        self._buffers: list[list[tuple[bytes | None, Any]]] = [[] for _ in range(BUCKETS)]
        self._held = 0

    def process(
        self, element: tuple[bytes | None, Any] | list[tuple[bytes | None, Any]]
    ) -> Iterator[tuple[int, tuple[int, bytes, bytes]]]:
        buffers = self._buffers
        for keyed in element if isinstance(element, list) else (element,):
            key = keyed[0]
            buffers[bucket_of(key, BUCKETS) if key is not None else self._held % BUCKETS].append(keyed)
            self._held += 1
            if self._held >= FLUSH_AT:
                yield from self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for batch in self._flush():
            yield GlobalWindows.windowed_value(batch)

    def _flush(self) -> Iterator[tuple[int, tuple[int, bytes, bytes]]]:
        for bucket, pairs in enumerate(self._buffers):
            if pairs:
                keys = b"".join(NO_KEY if key is None else key for key, _value in pairs)
                values = pack_bytes(pickle.dumps([value for _key, value in pairs], protocol=pickle.HIGHEST_PROTOCOL))
                yield bucket, (_REQUESTS, keys, values)
                self._buffers[bucket] = []
        self._held = 0


def _probe(bucket: tuple[int, Iterable[tuple[int, bytes, bytes]]]) -> Iterator[tuple[Any, StoredResponse | None]]:
    """One bucket's batches -> ``(value, chosen entry or None)`` for every request in it."""
    for values, entries in _joined(bucket):
        yield from zip(pickle.loads(unpack_bytes(values)), entries, strict=True)  # noqa: S301 - this run's rows


def _joined(bucket: tuple[int, Iterable[tuple[int, bytes, bytes]]]) -> Iterator[JoinedBatch]:
    """One bucket's batches -> each request batch, its values still packed, with the entry each request gets."""
    _bucket, batches = bucket
    requests: list[tuple[bytes, bytes]] = []
    stored: list[tuple[bytes, bytes]] = []
    for side, keys, payload in batches:
        (requests if side == _REQUESTS else stored).append((keys, payload))
    if not requests:  # stored entries no request of this run asks for
        return
    wanted = {keys[i : i + KEY_BYTES] for keys, _values in requests for i in range(0, len(keys), KEY_BYTES)}
    wanted.discard(NO_KEY)
    found = find_lines(stored, wanted) if wanted else {}
    del stored
    chosen = {key: choose(lines) for key, lines in found.items()}
    for keys, values in requests:
        yield JoinedBatch(values, [chosen.get(keys[i : i + KEY_BYTES]) for i in range(0, len(keys), KEY_BYTES)])


class JoinStored(beam.PTransform):
    """``(bucket, request batch)`` (``BatchByBucket``) -> ``(value, StoredResponse or None)`` per request.

    Args:
        stored: the store's and journal's entries (``ReadResponses``).
        batched: emit one ``JoinedBatch`` per request batch instead: its values as they
            crossed the join, still packed, so a consumer that needs only some of them
            (or none: every request a hit, ``transforms.cache``) never unpacks the rest.
    """

    def __init__(self, stored: beam.PCollection[tuple[int, tuple[int, bytes, bytes]]], batched: bool = False) -> None:
        super().__init__()
        self._stored = stored
        self._batched = batched

    def expand(self, requests: beam.PCollection[tuple[int, tuple[int, bytes, bytes]]]) -> beam.PCollection[Any]:
        probe = beam.FlatMap(_joined) if self._batched else beam.FlatMap(_probe)
        return (requests, self._stored) | "Both" >> beam.Flatten() | "ByBucket" >> beam.GroupByKey() | "Probe" >> probe
