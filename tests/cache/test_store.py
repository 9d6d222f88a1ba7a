"""The store on local files: publishing a journal, stats, prune and compact, and the cache settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beameval.cache import store
from beameval.cache.entry import choose, encode_entry
from beameval.cache.files import LocalFiles
from beameval.cache.journal import JournalWriter
from beameval.config.cache import CacheConfig, StoreUse, store_use

FILES = LocalFiles()
DAY = 86_400.0
NOW = 1_700_000_000.0


def key(n: int) -> str:
    return f"{n:064x}"


def write_shard(path: Path, entries: list[tuple[int, dict, float]], torn: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(encode_entry(key(n), response, "m", at) for n, response, at in entries)
    if torn:
        data += encode_entry(key(999), {"x": 1}, "m", NOW)[:100]
    path.write_bytes(data)


def entries_of(root: Path) -> list[dict]:
    lines = [line for p in sorted((root / "entries").glob("*.jsonl")) for line in p.read_bytes().splitlines()]
    return [json.loads(line) for line in lines]


def test_publish_copies_each_journal_shard_once(tmp_path: Path):
    journal = tmp_path / "out" / "_responses"
    writer = JournalWriter(str(journal), flush_interval=0)
    writer.record(key(1), {"a": 1}, "m")
    writer.close()
    assert store.publish(FILES, str(journal), FILES, str(tmp_path / "store")) == 1
    assert store.publish(FILES, str(journal), FILES, str(tmp_path / "store")) == 0  # already there
    assert [e["response"] for e in entries_of(tmp_path / "store")] == [{"a": 1}]
    assert store.publish(FILES, str(tmp_path / "nothing"), FILES, str(tmp_path / "store")) == 0


def test_stats_counts_entries_keys_models_and_unreadable_lines(tmp_path: Path):
    root = tmp_path / "store"
    write_shard(root / "entries" / "a.jsonl", [(1, {"r": 1}, NOW - DAY), (2, {"r": 2}, NOW)], torn=True)
    write_shard(root / "entries" / "b.jsonl", [(1, {"r": 3}, NOW + 5)])
    stats = store.stats(FILES, str(root)).as_dict()
    assert stats["shards"] == 2 and stats["entries"] == 3 and stats["distinct_keys"] == 2
    assert stats["unreadable_lines"] == 1 and stats["models"] == {"m": 3}
    assert stats["oldest"] == "2023-11-13T22:13:20Z" and stats["newest"] == "2023-11-14T22:13:25Z"


def test_prune_drops_old_entries_and_keeps_untouched_shards(tmp_path: Path):
    root = tmp_path / "store"
    write_shard(root / "entries" / "old.jsonl", [(1, {}, NOW - 40 * DAY)])
    write_shard(root / "entries" / "mixed.jsonl", [(2, {}, NOW - 40 * DAY), (3, {}, NOW - DAY)])
    write_shard(root / "entries" / "new.jsonl", [(4, {}, NOW)])
    before = (root / "entries" / "new.jsonl").stat().st_mtime_ns
    kept, dropped = store.prune(FILES, str(root), 30 * DAY, now=lambda: NOW)
    assert (kept, dropped) == (2, 2)
    assert sorted(e["key"] for e in entries_of(root)) == [key(3), key(4)]
    assert not (root / "entries" / "old.jsonl").exists() and not (root / "entries" / "mixed.jsonl").exists()
    assert (root / "entries" / "new.jsonl").stat().st_mtime_ns == before


def test_compact_keeps_one_entry_per_key_the_one_lookups_choose(tmp_path: Path):
    root = tmp_path / "store"
    copies = {n: [({"n": n, "copy": c}, NOW + 10 * c - n) for c in range(3)] for n in range(40)}
    for shard in range(3):
        write_shard(
            root / "entries" / f"s{shard}.jsonl",
            [(n, copies[n][shard][0], copies[n][shard][1]) for n in range(40)],
            torn=shard == 2,
        )
    expected = {
        key(n): choose([encode_entry(key(n), response, "m", at) for response, at in copies[n]]).response
        for n in range(40)
    }
    shards, before, after = store.compact(FILES, str(root))
    assert (shards, before, after) == (3, 121, 40)  # the torn line has a readable key prefix, so it is counted
    result = entries_of(root)
    assert {e["key"]: e["response"] for e in result} == expected
    assert all(e["response"]["copy"] == 0 for e in result)  # the earliest recorded copy
    assert len(list((root / "entries").glob("*.jsonl"))) <= 16


@pytest.mark.parametrize(
    ("config", "flag", "no_cache", "expected"),
    [
        (None, None, False, StoreUse()),
        (None, "/s/", False, StoreUse("/s", True, True)),
        (CacheConfig(path="gs://b/p", mode="read_only"), None, False, StoreUse("gs://b/p", True, False)),
        (CacheConfig(path="/a", mode="write_only"), "/b", False, StoreUse("/b", False, True)),
        (CacheConfig(path="/a", mode="off"), None, False, StoreUse()),
        (CacheConfig(path="/a"), "/b", True, StoreUse()),
    ],
)
def test_store_use_combines_config_and_flags(config, flag, no_cache, expected):
    assert store_use(config, flag, no_cache) == expected


def test_the_cache_config_refuses_unknown_modes_and_keys():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        CacheConfig(path="/a", mode="sometimes")
    with pytest.raises(ValidationError):
        CacheConfig(path="/a", ttl=3)
