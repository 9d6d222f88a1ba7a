"""The shared response store: its layout, and adding, inspecting, pruning and compacting it.

Layout: ``STORE/entries/*.jsonl``, shards of the same JSON lines as a run's journal
(``beameval.cache.entry``), on any file system ``Files`` reaches. Shards are only ever
added whole or deleted whole, never rewritten in place, so many runs and workers can
share one store: a completing run copies its journal shards in under their own
(globally unique) names; ``prune`` and ``compact`` write their new shards first and
delete the old ones after, so a reader sees every entry at least once at any moment
(duplicates are harmless: ``entry.choose`` picks the same one every time).

Every shard appears whole: on a local store it is written under a temporary name,
fsynced, renamed into place and its directory fsynced (``core.durable.atomic_file``),
so a kill or a full disk part-way leaves no shard (the next publish copies it again),
never a torn one that a name check would skip for ever; an object store makes an upload
visible only when it is closed, which is the same guarantee. A reader whose shard is
deleted under it (by ``prune`` or ``compact`` in another process) is not an error: the
entries live on in the shards that replaced it (``successors``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import IO

from beameval.cache.entry import choose, decode_entry, iter_lines, line_key
from beameval.cache.files import Files, is_remote
from beameval.core.crash_points import crash_point
from beameval.core.durable import atomic_file, stale_temporaries

__all__ = [
    "ENTRIES_DIR",
    "SHARD_PATTERN",
    "StoreStats",
    "compact",
    "folder_stats",
    "prune",
    "publish",
    "shards",
    "stats",
    "successors",
]

ENTRIES_DIR = "entries"
#: A shard's name; temporary files (``core.durable.atomic_file``) never match it.
SHARD_PATTERN = "*.jsonl"
_BUCKETS = 16  # compact's output shards: one per first hex digit of the key


_COPY_CHUNK = 1 << 20


def shards(files: Files, directory: str) -> list[str]:
    """The shard files directly in ``directory`` (a journal, or a store's ``entries/``)."""
    return files.match(files.join(directory, SHARD_PATTERN))


def successors(list_shards: Callable[[str], list[str]], listed: Iterable[str], gone: Iterable[str]) -> list[str]:
    """The shards that replaced ``gone`` ones: those in the same folders now that were not ``listed``.

    ``prune`` and ``compact`` write every entry they keep into new shards before they
    delete the old ones, so whoever listed a shard that has since gone finds its entries
    here (with others: duplicates are harmless).

    Args:
        list_shards: a folder -> the shards in it now (``shards`` on some ``Files``).
        listed: every shard already read or being read.
        gone: the listed shards found deleted.
    """
    known = set(listed)
    folders = sorted({path.rsplit("/", 1)[0] for path in gone})
    return sorted({path for folder in folders for path in list_shards(folder) if path not in known})


def publish(journal_files: Files, journal_dir: str, store_files: Files, store: str) -> int:
    """Add a run's journal to the store: copy each shard the store does not hold whole yet.

    Idempotent: a shard already copied (by an earlier completion of a resumed run) is
    skipped, since journal shard names are unique; a local copy whose size differs from
    its source (torn by a writer of an older version that copied in place) is copied
    again. Each shard is streamed from the journal's file system into the store's, which
    may differ (a local output, a ``gs://`` store: a file system's own copy works only
    within it), and appears whole or not at all.

    Args:
        journal_files: the journal's file system.
        journal_dir: the run's ``OUT_DIR/_responses``.
        store_files: the store's file system.
        store: the store's directory.

    Returns:
        The number of shards copied.

    """
    copied = 0
    for source in shards(journal_files, journal_dir):
        destination = store_files.join(store, ENTRIES_DIR, os.path.basename(source))
        if store_files.exists(destination) and not _torn(source, destination):
            continue
        with journal_files.open(source) as reader, _create_shard(store_files, destination) as writer:
            shutil.copyfileobj(reader, writer, _COPY_CHUNK)
            crash_point("store-shard-written")  # a kill here leaves no shard under its final name
        copied += 1
    return copied


def _torn(source: str, destination: str) -> bool:
    """A local copy shorter or longer than its local source (sizes of other file systems are not compared)."""
    if is_remote(source) or is_remote(destination):
        return False
    try:
        return os.path.getsize(source) != os.path.getsize(destination)
    except FileNotFoundError:
        return False


def _create_shard(files: Files, path: str) -> AbstractContextManager[IO[bytes]]:
    """A new shard that appears whole: write-then-rename locally, a plain upload on an object store."""
    return files.create(path) if is_remote(path) else atomic_file(path)


@dataclass
class StoreStats:
    """What ``python -m pipeline.cache stats`` reports."""

    shards: int = 0
    bytes: int = 0
    entries: int = 0
    distinct_keys: int = 0
    unreadable_lines: int = 0  # torn last lines, other key versions, anything else
    oldest: float | None = None
    newest: float | None = None
    models: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready, times in ISO 8601 UTC."""
        return {
            "shards": self.shards,
            "bytes": self.bytes,
            "entries": self.entries,
            "distinct_keys": self.distinct_keys,
            "unreadable_lines": self.unreadable_lines,
            "oldest": _iso(self.oldest),
            "newest": _iso(self.newest),
            "models": dict(self.models.most_common()),
        }


def _iso(moment: float | None) -> str | None:
    return None if moment is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


def _lines(files: Files, path: str) -> Iterator[bytes]:
    """A shard's lines; none when it was deleted since it was listed (its entries live on in its successors)."""
    try:
        stream = files.open(path)
    except Exception:  # noqa: BLE001 - each file system says "not found" its own way
        if files.exists(path):
            raise
        return
    with stream:
        yield from iter_lines(stream)


def stats(files: Files, store: str) -> StoreStats:
    """Count the store's shards, entries and distinct keys (about 100 B of memory per distinct key)."""
    return folder_stats(files, files.join(store, ENTRIES_DIR))


def folder_stats(files: Files, directory: str) -> StoreStats:
    """``stats`` of the shards directly in ``directory``: a store's ``entries/``, or a run's journal."""
    result = StoreStats()
    keys: set[bytes] = set()
    for path in shards(files, directory):
        result.shards += 1
        for line in _lines(files, path):
            result.bytes += len(line) + 1
            entry = decode_entry(line)
            if entry is None:
                result.unreadable_lines += 1
                continue
            result.entries += 1
            keys.add(bytes.fromhex(entry.key))
            result.models[entry.model or "-"] += 1
            result.oldest = entry.recorded_at if result.oldest is None else min(result.oldest, entry.recorded_at)
            result.newest = entry.recorded_at if result.newest is None else max(result.newest, entry.recorded_at)
    result.distinct_keys = len(keys)
    return result


def prune(files: Files, store: str, older_than_s: float, now: Callable[[], float] = time.time) -> tuple[int, int]:
    """Drop entries recorded more than ``older_than_s`` seconds ago (and unreadable lines).

    A shard with nothing to drop is left alone; one with only old entries is deleted; any
    other is rewritten as a new shard before the old one is deleted.

    Returns:
        ``(entries kept, entries dropped)``.

    """
    cutoff = now() - older_than_s
    kept = dropped = 0
    directory = files.join(store, ENTRIES_DIR)
    for path in shards(files, directory):
        keep: list[bytes] = []
        drop = 0
        for line in _lines(files, path):
            entry = decode_entry(line)
            if entry is None or entry.recorded_at < cutoff:
                drop += 1
            else:
                keep.append(line)
        kept += len(keep)
        dropped += drop
        if not drop:
            continue
        if keep:
            _write(files, files.join(directory, f"pruned-{uuid.uuid4().hex}.jsonl"), keep)
        _delete(files, [path])
    _delete(files, _temporaries(directory))
    return kept, dropped


def compact(files: Files, store: str) -> tuple[int, int, int]:
    """Rewrite the store as one shard per key bucket, one entry per key (the one ``choose`` picks).

    Memory is bounded by the largest bucket: entries are first spread over local
    temporary files by the key's first hex digit, then each bucket is deduplicated alone.

    Returns:
        ``(shards before, entries before, entries after)``.

    """
    directory = files.join(store, ENTRIES_DIR)
    old = shards(files, directory)
    before = 0
    with tempfile.TemporaryDirectory(prefix="beameval-compact-") as scratch:
        buckets = [open(os.path.join(scratch, f"{b:x}"), "wb") for b in range(_BUCKETS)]  # noqa: SIM115
        try:
            for path in old:
                for line in _lines(files, path):
                    key = line_key(line)
                    if key is not None:
                        before += 1
                        buckets[int(key[0], 16)].write(line + b"\n")
        finally:
            for handle in buckets:
                handle.close()
        after = 0
        stamp = uuid.uuid4().hex[:12]
        for bucket in range(_BUCKETS):
            by_key: dict[str, list[bytes]] = {}
            with open(os.path.join(scratch, f"{bucket:x}"), "rb") as bucket_file:
                for line in iter_lines(bucket_file):
                    key = line_key(line)
                    if key is not None:
                        by_key.setdefault(key, []).append(line)
            chosen = [_chosen_line(lines) for lines in by_key.values()]
            kept = [line for line in chosen if line is not None]
            if kept:
                _write(files, files.join(directory, f"compact-{stamp}-{bucket:x}.jsonl"), kept)
            after += len(kept)
    _delete(files, [*old, *_temporaries(directory)])
    return len(old), before, after


def _chosen_line(lines: list[bytes]) -> bytes | None:
    best = choose(lines)
    if best is None:
        return None
    return next(line for line in lines if decode_entry(line) == best)


def _write(files: Files, path: str, lines: list[bytes]) -> None:
    with _create_shard(files, path) as handle:
        handle.write(b"".join(line + b"\n" for line in lines))


def _temporaries(directory: str) -> list[str]:
    """Shards of writers killed over an hour ago, still under their temporary names (local stores only)."""
    return [] if is_remote(directory) else stale_temporaries(directory)


def _delete(files: Files, paths: list[str]) -> None:
    """Delete shards; one that is already gone (another ``prune`` or ``compact`` removed it) is no error."""
    try:
        files.delete(paths)
    except Exception:  # noqa: BLE001 - a Beam file system refuses a batch with a missing path in it
        for path in paths:
            if files.exists(path):
                files.delete([path])
