"""What survives a crash: fsync where durability is promised, whole shards, readers of a store being compacted.

``os.fsync`` is observed, not replaced: a spy records which file each call synced (by
its descriptor's ``/proc/self/fd`` link) and calls the real one. Crashes are real: a
subprocess killed with SIGKILL at a named crash point (``BEAMEVAL_CRASH_AT``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from beameval.cache import store
from beameval.cache.entry import encode_entry, line_key
from beameval.cache.files import LocalFiles
from beameval.cache.journal import JournalWriter
from beameval.core.crash_points import CRASH_ENV
from beameval.core.durable import TEMPORARY_SUFFIX, atomic_file, exchange, write_atomically
from beameval.testserver.harness import PROJECT_ROOT

FILES = LocalFiles()


def key(n: int) -> str:
    return f"{n:064x}"


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``os.fsync`` was called on, in order (the real fsync still runs)."""
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


def test_journal_sync_fsyncs_the_shard_and_a_new_shard_fsyncs_its_directory(tmp_path: Path, fsynced: list[str]):
    journal = tmp_path / "out" / "_responses"
    writer = JournalWriter(str(journal), flush_interval=0)
    writer.record(key(1), {"a": 1}, "m")
    writer.flush()  # the 0.25 s flush reaches the OS only: no fsync
    assert fsynced == [str(journal)]  # ...but creating the shard made its name durable
    writer.sync()
    (shard,) = writer.shards
    assert fsynced == [str(journal), shard]
    writer.record(key(2), {"a": 2}, "m")
    writer.sync()
    assert fsynced == [str(journal), shard, shard]  # every bundle's sync
    writer.close()
    assert fsynced[-1] == shard  # a closed shard is durable
    assert [line_key(line) for line in Path(shard).read_bytes().splitlines()] == [key(1), key(2)]


def test_atomic_writes_fsync_the_file_then_its_directory_and_leave_no_temporary(tmp_path: Path, fsynced: list[str]):
    target = tmp_path / "results.json"
    write_atomically(str(target), b"{}")
    assert len(fsynced) == 2 and fsynced[0].startswith(str(target) + ".") and fsynced[1] == str(tmp_path)
    assert target.read_bytes() == b"{}" and os.listdir(tmp_path) == ["results.json"]
    with pytest.raises(RuntimeError), atomic_file(str(target)) as handle:
        handle.write(b"half")
        raise RuntimeError("the writer failed part-way")
    assert target.read_bytes() == b"{}" and os.listdir(tmp_path) == ["results.json"]


def test_a_published_store_shard_is_fsynced_under_a_temporary_name_before_it_gets_its_own(
    tmp_path: Path, fsynced: list[str]
):
    journal = tmp_path / "out" / "_responses"
    writer = JournalWriter(str(journal), flush_interval=0)
    writer.record(key(1), {"a": 1}, "m")
    writer.close()
    fsynced.clear()
    assert store.publish(FILES, str(journal), FILES, str(tmp_path / "store")) == 1
    entries = tmp_path / "store" / "entries"
    (name,) = os.listdir(entries)
    assert fsynced[0].startswith(str(entries / name) + ".") and fsynced[0].endswith(TEMPORARY_SUFFIX)
    assert fsynced[1:] == [str(entries)]


def test_exchange_swaps_two_folders_in_one_step(tmp_path: Path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "a").write_text("old")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "b").write_text("new")
    if not exchange(str(tmp_path / "new"), str(tmp_path / "old")):
        pytest.skip("this file system has no RENAME_EXCHANGE; publish renames the old entry aside instead")
    assert os.listdir(tmp_path / "old") == ["b"] and os.listdir(tmp_path / "new") == ["a"]


PUBLISH = textwrap.dedent(
    """
    import sys
    from beameval.cache import store
    from beameval.cache.files import LocalFiles
    files = LocalFiles()
    print(store.publish(files, sys.argv[1], files, sys.argv[2]))
    """
)


def test_a_kill_while_a_shard_is_copied_leaves_no_shard_and_the_next_publish_copies_it_whole(tmp_path: Path):
    journal = tmp_path / "out" / "_responses"
    writer = JournalWriter(str(journal), flush_interval=0)
    for n in range(500):
        writer.record(key(n), {"answer": "x" * 200}, "m")
    writer.close()
    command = [sys.executable, "-c", PUBLISH, str(journal), str(tmp_path / "store")]
    killed = subprocess.run(
        command, cwd=PROJECT_ROOT, env={**os.environ, CRASH_ENV: "store-shard-written"}, capture_output=True
    )
    assert killed.returncode == -9
    entries = tmp_path / "store" / "entries"
    assert store.shards(FILES, str(entries)) == []  # only a temporary, which no reader matches
    assert [name.endswith(TEMPORARY_SUFFIX) for name in os.listdir(entries)] == [True]
    assert store.publish(FILES, str(journal), FILES, str(tmp_path / "store")) == 1
    (shard,) = store.shards(FILES, str(entries))
    assert Path(shard).read_bytes() == Path(writer.shards[0]).read_bytes()


def test_a_torn_shard_under_its_final_name_is_copied_again(tmp_path: Path):
    journal = tmp_path / "out" / "_responses"
    writer = JournalWriter(str(journal), flush_interval=0)
    for n in range(50):
        writer.record(key(n), {"answer": n}, "m")
    writer.close()
    (source,) = writer.shards
    torn = tmp_path / "store" / "entries" / os.path.basename(source)
    torn.parent.mkdir(parents=True)
    torn.write_bytes(Path(source).read_bytes()[:1000])  # what an in-place copy killed part-way left
    assert store.publish(FILES, str(journal), FILES, str(tmp_path / "store")) == 1
    assert torn.read_bytes() == Path(source).read_bytes()
    assert store.stats(FILES, str(tmp_path / "store")).distinct_keys == 50


def test_a_reader_whose_shards_were_compacted_away_finds_every_entry_in_their_successors(tmp_path: Path):
    entries = tmp_path / "store" / "entries"
    entries.mkdir(parents=True)
    for shard in range(4):
        lines = [encode_entry(key(shard * 10 + n), {"n": n}, "m", 1.0 + n) for n in range(10)]
        (entries / f"run-{shard}.jsonl").write_bytes(b"".join(lines))
    listed = store.shards(FILES, str(entries))  # what a run's driver listed when it started
    store.compact(FILES, str(tmp_path / "store"))  # then a maintenance job, in between
    gone = [path for path in listed if not os.path.exists(path)]
    assert gone == listed
    found = store.successors(lambda folder: store.shards(FILES, folder), listed, gone)
    keys = {line_key(line) for path in found for line in Path(path).read_bytes().splitlines()}
    assert keys == {key(n) for n in range(40)}


class ListedBeforeDeleted(LocalFiles):
    """A file system whose listing still names shards another process deleted right after (the race, made certain)."""

    def __init__(self, deleted: list[str]) -> None:
        self._deleted = deleted

    def match(self, pattern: str) -> list[str]:
        return sorted({*super().match(pattern), *self._deleted})


def test_compact_and_prune_skip_a_shard_deleted_after_they_listed_it(tmp_path: Path):
    """Two compactions at once: the second finds shards the first deleted (their entries are in the first's output)."""
    root = tmp_path / "store"
    (root / "entries").mkdir(parents=True)
    for shard in range(3):
        lines = [encode_entry(key(shard * 10 + n), {"n": n}, "m", 1.0) for n in range(10)]
        (root / "entries" / f"run-{shard}.jsonl").write_bytes(b"".join(lines))
    gone = str(root / "entries" / "run-1.jsonl")
    os.remove(gone)
    files = ListedBeforeDeleted([gone])
    assert store.prune(files, str(root), older_than_s=1e12) == (20, 0)
    assert store.compact(files, str(root)) == (3, 20, 20)
    assert store.stats(FILES, str(root)).distinct_keys == 20
