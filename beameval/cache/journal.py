"""The run's journal: every successful response appended to ``OUT_DIR/_responses/`` as it arrives.

Each worker process has one ``JournalWriter`` per directory (``JournalWriter.shared``),
fed from any thread: the engine's event loop records a response the moment it has
parsed it, at the cost of one deque append. A background thread writes what has queued
up and flushes the shard every ``flush_interval`` seconds (0.25 s), so a kill -9 loses at
most that much. Each process writes its own shard files, named
``<time>-<pid>-<random>-<seq>.jsonl``, never shared with another writer. A shard is
closed and the next one started every ``rotate_after_s`` seconds or ``max_lines`` lines;
a closed shard is complete and never written again. On a Beam file-system URL
(``gs://…``) nothing is visible until a file is closed, so there shards are rotated every
second instead (``compact`` merges the small files later). Local shards are flushed to the
operating system every 0.25 s, which survives the death of the process; ``sync`` (called
at the end of every bundle, before its rows move on) also fsyncs the shard, and a new
shard's directory is fsynced when the shard is created, so what a finished bundle
recorded survives the death of the machine too.

Only successes are recorded: the caller records after the handler parsed the reply into
a sample, so errors and empty answers never reach a journal.

The writer also keeps the process's send-time look-up up to date (``index``, a
``journal_index.JournalIndex``: each entry's shard and offset as it is written) and its
calls in flight (``in_flight``): ``answered`` is what a sending stage asks before it sends.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import IO, Any, ClassVar, NamedTuple

from beameval.cache.entry import StoredResponse, encode_entry
from beameval.cache.files import Files, LocalFiles, is_remote
from beameval.cache.in_flight import InFlight
from beameval.cache.journal_index import JournalIndex
from beameval.core.durable import disk_full, fsync_directory

__all__ = ["JOURNAL_DIR", "JournalWriter", "RowRecorder"]

log = logging.getLogger(__name__)

#: The journal's folder inside the output directory.
JOURNAL_DIR = "_responses"

_Pending = tuple[str, Any, "str | None", float, "str | None"]


class JournalWriter:
    """Appends response entries to this process's shard files in one directory.

    Args:
        directory: where the shards go (``OUT_DIR/_responses``).
        files: the file system (``LocalFiles`` for plain paths).
        flush_interval: seconds between background flushes; 0 starts no thread (tests
            call ``flush`` themselves).
        rotate_after_s: close a shard once it is this old (default: 1 s on a
            file-system URL, 300 s on a local path).
        max_lines: close a shard after this many entries.
        clock: Unix time, for ``recorded_at`` and rotation.

    """

    _registry: ClassVar[dict[str, JournalWriter]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()
    _registry_pid: ClassVar[int] = os.getpid()

    def __init__(
        self,
        directory: str,
        files: Files | None = None,
        *,
        flush_interval: float = 0.25,
        rotate_after_s: float | None = None,
        max_lines: int = 200_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self._files = files or LocalFiles()
        self._remote = is_remote(directory)
        self._rotate_after_s = rotate_after_s if rotate_after_s is not None else (1.0 if self._remote else 300.0)
        self._max_lines = max_lines
        self._clock = clock
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(clock()))
        self._prefix = f"{stamp}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._sequence = 0
        self._pending: deque[_Pending] = deque()
        self._lock = threading.Lock()
        self._handle: IO[bytes] | None = None
        self._opened_at = 0.0
        self._lines = 0
        self._bytes = 0  # written to the open shard: the next entry's offset
        self._queued: set[str] = set()  # keys recorded and not written yet
        self.index = JournalIndex(directory, self._files, before_read=self._readable)
        self.in_flight = InFlight()
        self.recorded = 0
        self.shards: list[str] = []  # every shard this writer created, in order
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if flush_interval > 0:
            self._thread = threading.Thread(
                target=self._flush_loop, args=(flush_interval,), name="journal-flush", daemon=True
            )
            self._thread.start()

    @classmethod
    def shared(cls, directory: str, files: Files | None = None) -> JournalWriter:
        """Return this process's writer for ``directory``, creating it on first use.

        Args:
            directory: the journal directory.
            files: the file system to create it on (first call only).

        Returns:
            The process-wide writer; a forked process gets its own.

        """
        with cls._registry_lock:
            if cls._registry_pid != os.getpid():  # forked: the parent's writers (and thread) are not ours
                cls._registry = {}
                cls._registry_pid = os.getpid()
            writer = cls._registry.get(directory)
            if writer is None or writer._closed:
                writer = cls._registry[directory] = cls(directory, files)
            return writer

    @classmethod
    def close_all(cls) -> None:
        """Write, flush and close every writer of this process (the end of a run, or exit)."""
        with cls._registry_lock:
            writers = list(cls._registry.values()) if cls._registry_pid == os.getpid() else []
            cls._registry = {}
        for writer in writers:
            writer.close()

    def record(self, key: str, response: Any, model: str | None, row: str | None = None) -> None:
        """Queue one successful response; thread-safe and cheap (the background thread writes it).

        Args:
            key: the request's ``response_key``.
            response: the decoded JSON reply, or its body as received (``encode_entry``
                checks that such bytes fit on one line).
            model: the model name the request asked for.
            row: the row it was sent for (``journal_index.row_token``).

        """
        if not self._closed:
            self._queued.add(key)
            self._pending.append((key, response, model, self._clock(), row))

    def answered(self, key: str, row: str) -> StoredResponse | None:
        """The run's recorded answer to ``key`` sent for ``row`` (this process's, or any shard's indexed so far)."""
        if key in self._queued:  # answered a moment ago, not written yet
            self.flush()
        return self.index.find(key, row)

    def for_row(self, row: str) -> RowRecorder:
        """A recorder that records its entries as answers to ``row`` (for ``RecordingHandler``)."""
        return RowRecorder(self, row)

    def flush(self) -> None:
        """Write every queued entry and flush the shard to the operating system; rotate when due."""
        with self._lock:
            self._write_pending()
            if self._handle is not None:
                self._handle.flush()
                if self._lines >= self._max_lines or self._clock() - self._opened_at >= self._rotate_after_s:
                    self._close_shard()

    def sync(self) -> None:
        """Make every recorded entry durable and visible: flush and fsync, and on a file-system URL close the shard.

        Raises:
            OSError: the shard cannot be written (a full disk): the caller's bundle fails, so
                its rows are not reported as answered while their responses are not kept.
        """
        with self._lock:
            self._write_pending()
            if self._handle is not None:
                if self._remote:
                    self._close_shard()
                else:
                    self._handle.flush()
                    os.fsync(self._handle.fileno())

    def close(self) -> None:
        """Write what is queued, close the shard and stop the background thread."""
        if self._closed:
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        with self._lock:
            self._write_pending()
            self._close_shard()
            self._closed = True

    def _flush_loop(self, interval: float) -> None:
        warned = False
        while not self._stop.wait(interval):
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - the thread must not die; the bundle's sync reports it
                if not warned:  # once, not four times a second; the traceback only with --debug
                    cause = disk_full(exc) or exc
                    log.warning("cannot write the response journal in %s: %s", self.directory, cause)
                    log.debug("the journal's write failed", exc_info=True)
                    warned = True

    def _write_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        if self._handle is None:
            self._sequence += 1
            path = self._files.join(self.directory, f"{self._prefix}-{self._sequence:05d}.jsonl")
            self.index.ignore([path])  # indexed entry by entry below, never from the directory
            self._handle = self._files.create(path)
            self.shards.append(path)
            if not self._remote:
                fsync_directory(self.directory)  # the new shard's name survives a crash of the machine
            self._opened_at = self._clock()
            self._lines = 0
            self._bytes = 0
        chunks = []
        path = self.shards[-1]
        while pending:
            key, response, model, recorded_at, row = pending.popleft()
            self._queued.discard(key)
            try:
                chunk = encode_entry(key, response, model, recorded_at, row)
            except (TypeError, ValueError):  # a reply JSON decoded from bytes always encodes; be safe
                continue
            chunks.append(chunk)
            if row is not None:
                self.index.add(key, row, path, self._bytes)
            self._bytes += len(chunk)
        self._handle.write(b"".join(chunks))
        self._lines += len(chunks)
        self.recorded += len(chunks)

    def _readable(self, path: str) -> None:
        """Before ``index`` reads a line of ``path``: make the open shard's lines readable (a retry needs them)."""
        with self._lock:
            if self._handle is None or path != self.shards[-1]:
                return
            if self._remote:
                self._close_shard()
            else:
                self._handle.flush()

    def _close_shard(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            with handle:
                if not self._remote:  # a closed shard is complete: durable before it is called so
                    handle.flush()
                    os.fsync(handle.fileno())


class RowRecorder(NamedTuple):
    """Records into ``writer`` as answers to ``row``: a ``recording.Recorder`` for one row's request."""

    writer: JournalWriter
    row: str

    def record(self, key: str, response: Any, model: str | None) -> None:
        """Record one success of this row's request."""
        self.writer.record(key, response, model, self.row)


atexit.register(JournalWriter.close_all)
