"""The send-time look-up: the answers this run has already paid for, found in its journal just before sending.

The graph-time join (``transforms.cache``) answers rows from the journal shards listed when
the run starts. A Beam runner can run a bundle again after that: a later stage of the same
fused stage failed, a worker was lost (a Flink TaskManager, a Dataflow VM), a speculative
copy started. The retried bundle's rows reach ``GenerateSamples`` (or
``CallMetricEndpoints``) again, and their answers are in the journal by then: this index
finds them, so the request is not sent, and not paid, twice.

An answer is looked up by its response key *and* the row it was sent for (a journal line
names its row, ``StoredResponse.row``): the look-up is about retries, so two rows of a
dataset that ask the same thing are each sent, as in a run no runner retried.

Each worker process has one index per journal directory (its ``JournalWriter``'s). It
knows two kinds of shards:

* the process's own, entry by entry, as its writer writes them (``add``): a bundle retried
  in the same process (Beam's usual retry) finds every answer its first attempt recorded,
  at no cost but a table look-up;
* every other shard in the directory (``refresh``, called as each bundle starts, at most
  every ``refresh_every_s``): lines written since the last refresh, by other processes
  alive or dead, read sequentially, key and row sliced out without decoding a response.

Only positions are held (``locations.KeyLocations``, 16 bytes an entry): a hit reads its
one line back from its shard. Shards the graph-time join already read (the store's, and
with ``--resume`` the earlier invocations' journal) are ignored: their rows never reach
the sending stages.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable

from beameval.cache.entry import StoredResponse, decode_entry, line_key, line_row
from beameval.cache.files import Files, is_remote
from beameval.cache.locations import KeyLocations, location, split_location

__all__ = ["JournalIndex", "row_token"]

#: Bytes read from a shard at a time while indexing it.
_CHUNK = 1 << 22


def row_token(row_index: int, sample_index: int) -> str:
    """A row's identity in the journal and in the metric join: ``row_index/sample_index``."""
    return f"{row_index}/{sample_index}"


def _slot(key: str, row: str) -> str:
    """The index's key for ``(response key, row)``: 64 bits of a hash of both, as hex."""
    return hashlib.blake2b(f"{key}/{row}".encode(), digest_size=8).hexdigest()


class JournalIndex:
    """``(response key, row)`` -> where its line is, over every shard of one journal directory.

    Args:
        directory: the journal (``OUT_DIR/_responses``).
        files: its file system.
        before_read: called with a shard's path before a line is read from it (the writer
            flushes its open shard).
        refresh_every_s: the least time between two listings of the directory.
        clock: monotonic seconds, for ``refresh_every_s``.

    """

    def __init__(
        self,
        directory: str,
        files: Files,
        *,
        before_read: Callable[[str], None] = lambda path: None,
        refresh_every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self._files = files
        self._before_read = before_read
        self._refresh_every_s = refresh_every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._locations = KeyLocations()
        self._paths: list[str] = []
        self._numbers: dict[str, int] = {}
        self._indexed_to: dict[str, int] = {}  # other processes' shards: bytes indexed so far
        self._ignored: set[str] = set()  # this process's shards, and those the graph-time join read
        self._complete: set[str] = set()  # shards on an object store, indexed whole once visible
        self._next_refresh = 0.0

    def __len__(self) -> int:
        return len(self._locations)

    def ignore(self, paths: Iterable[str]) -> None:
        """Never index these shards from the directory (the writer's own; the ones the graph-time join read)."""
        with self._lock:
            self._ignored.update(paths)

    def add(self, key: str, row: str, path: str, offset: int) -> None:
        """Index one line the writer has just written at ``offset`` in ``path``."""
        slot = _slot(key, row)
        with self._lock:
            self._locations.put(slot, location(self._number(path), offset))

    def refresh(self, force: bool = False) -> int:
        """Index the lines other processes wrote since the last refresh; returns how many.

        Args:
            force: refresh even if the last one was less than ``refresh_every_s`` ago.

        """
        now = self._clock()
        if not force and now < self._next_refresh:
            return 0
        self._next_refresh = now + self._refresh_every_s
        found = 0
        for path in self._files.match(self._files.join(self.directory, "*.jsonl")):
            if path not in self._ignored and path not in self._complete:
                found += self._index_shard(path)
        return found

    def find(self, key: str, row: str) -> StoredResponse | None:
        """The entry answering ``key`` for ``row`` in this journal, read from its shard; None when there is none."""
        slot = _slot(key, row)
        with self._lock:
            where = self._locations.get(slot)
            if where is None:
                return None
            shard, offset = split_location(where)
            path = self._paths[shard]
        self._before_read(path)
        try:
            with self._files.open(path) as stream:
                stream.seek(offset)
                line = stream.readline()
        except OSError:  # the shard went away (a pruned journal): send the request
            return None
        if line_key(line.rstrip(b"\r\n")) != key:  # another (key, row) sharing the slot's 64 bits
            return None
        entry = decode_entry(line)
        return entry if entry is not None and entry.row == row else None

    def _number(self, path: str) -> int:
        number = self._numbers.get(path)
        if number is None:
            number = self._numbers[path] = len(self._paths)
            self._paths.append(path)
        return number

    def _index_shard(self, path: str) -> int:
        """Index ``path`` from where the last refresh stopped, complete lines naming a row only."""
        position = self._indexed_to.get(path, 0)
        found = 0
        try:
            stream = self._files.open(path)
        except OSError:  # deleted since it was listed
            return 0
        with stream:
            if position:
                stream.seek(position)
            rest = b""
            while chunk := stream.read(_CHUNK):
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()  # a line not finished yet (a live writer's), or b""
                slots = []
                for line in lines:
                    key, row = line_key(line.rstrip(b"\r")), line_row(line)
                    if key is not None and row is not None:
                        slots.append((_slot(key, row), position))
                    position += len(line) + 1
                with self._lock:
                    number = self._number(path)
                    for slot, offset in slots:
                        self._locations.put(slot, location(number, offset))
                found += len(slots)
        self._indexed_to[path] = position
        if is_remote(path):  # visible only once closed: complete
            self._complete.add(path)
        return found
