"""The keyed join with the store: batches of lines, the bucketed join on a real Beam runner, and the one-pass keys."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beameval.cache.entry import bucket_of, encode_entry, line_key, pack_bytes, pack_lines, unpack_bytes, wanted_lines
from beameval.cache.key import prepared_key
from beameval.inference.prepared import PreparedRequest, request_hash
from transforms import store_join
from transforms.cache import request_keys
from transforms.store_join import BatchByBucket, JoinStored, ReadResponses

NOW = 1_700_000_000.0


def raw(n: int) -> bytes:
    return hashlib.sha256(f"key {n}".encode()).digest()


def line(n: int, response: Any, at: float) -> bytes:
    return encode_entry(raw(n).hex(), response, "m", at).rstrip(b"\n")


def test_a_batch_gives_back_every_copy_of_the_wanted_keys_and_skips_batches_without_one():
    lines = [line(1, "a", NOW), line(2, "b", NOW), line(1, "c", NOW + 1)]
    batch = pack_lines([raw(1), raw(2), raw(1)], lines)
    assert len(batch[0]) == 3 * 32
    not_packed = (raw(7) + raw(8), b"not even compressed")  # never decompressed: no key of it is wanted
    found = wanted_lines([not_packed, batch], {raw(1), raw(9)})
    assert found == {raw(1): [lines[0], lines[2]]}
    assert wanted_lines([batch], set()) == {}
    assert unpack_bytes(batch[1]) == b"\n".join(lines)
    assert len(batch[1]) < len(b"\n".join(lines))


@pytest.mark.parametrize("size", [0, 1, 1000, 3_000_000])
def test_packed_bytes_come_back_whole_and_repeated_text_shrinks(size: int):
    data = (b"row %d of one dataset, " * size)[: size * 10]
    packed = pack_bytes(data)
    assert unpack_bytes(packed) == data
    if size >= 1000:
        assert len(packed) < len(data) / 4


def test_buckets_spread_keys_evenly():
    counts = [0] * 16
    for n in range(16_000):
        counts[bucket_of(raw(n), 16)] += 1
    assert min(counts) > 850 and max(counts) < 1150  # 1,000 each, a few standard deviations (~31)
    assert bucket_of(bytes([0, 0, 1, 4]) + bytes(28), 256) == (256 + 4) % 256


@pytest.mark.parametrize(
    "prepared",
    [
        PreparedRequest("HTTP://Host.Example:80/v1/chat/completions", {"model": "m", "messages": []}, {}),
        PreparedRequest("https://h:8443/v1?x=1", {"z": [1.5, None, True], "a": "é ✓ \u2028"}, {"k": "v"}, 3),
        PreparedRequest("http://[::1]:9/v1", {"nested": {"b": 1, "a": [{"y": 2, "x": 1}]}}, {}, 1),
    ],
)
def test_request_keys_equal_prepared_key_and_request_hash(prepared: PreparedRequest):
    key, digest = request_keys(prepared)
    assert key == bytes.fromhex(prepared_key(prepared)) and digest == request_hash(prepared)
    fifth = dataclasses.replace(prepared, sample_index=5)
    assert request_keys(fifth)[0] == bytes.fromhex(prepared_key(prepared, 5))


def test_the_join_picks_the_earliest_entry_and_skips_torn_lines_and_other_versions(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(store_join, "FLUSH_AT", 7)  # batches flushed mid-shard and mid-bundle too
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    other_version = json.dumps({"key": raw(3).hex(), "v": 0, "model": "m", "recorded_at": 1.0, "response": "old"})
    a.write_bytes(
        b"\n".join([line(1, "later", NOW + 5), other_version.encode()] + [line(n, f"r{n}", NOW) for n in range(10, 60)])
        + b"\n"
        + line(2, "torn", NOW)[:90]  # a killed writer's last line
    )
    b.write_bytes(
        b"".join(line(n, r, at) + b"\n" for n, r, at in [(1, "earliest", NOW), (1, "last", NOW + 9)])
        + line(1, "torn and earlier", NOW - 50)[:-3]  # carries the key, never parses: cannot win
    )
    assert line_key(line(2, "torn", NOW)[:90]) == raw(2).hex()  # joined on its key, then not usable: a miss
    requests = [(raw(1), "one"), (raw(1), "one again"), (raw(2), "torn"), (raw(3), "v0"), (raw(4), "absent")]
    requests += [(None, "unkeyed")] + [(raw(n), f"n{n}") for n in range(10, 60, 2)]
    expected = [("one", "earliest"), ("one again", "earliest"), ("torn", None), ("v0", None), ("absent", None)]
    expected += [("unkeyed", None)] + [(f"n{n}", f"r{n}") for n in range(10, 60, 2)]

    with beam.Pipeline() as pipeline:
        stored = pipeline | "Read" >> ReadResponses([str(a), str(b)])
        joined = (
            pipeline
            | beam.Create(requests)
            | beam.ParDo(BatchByBucket())
            | JoinStored(stored)
            | beam.MapTuple(lambda value, best: (value, None if best is None else best.response))
        )
        assert_that(joined, equal_to(expected))


def test_shards_deleted_after_the_listing_are_read_from_the_shard_that_replaced_them_once(tmp_path: Path):
    """A compaction between the listing and the read: two listed shards are gone, one new shard holds their entries.

    Both gone shards lead to the same successor, which is read once (every entry once), and
    a run with nothing deleted reads no successor at all.
    """
    kept = tmp_path / "kept.jsonl"
    kept.write_bytes(line(1, "kept", NOW) + b"\n")
    gone = [str(tmp_path / "gone-a.jsonl"), str(tmp_path / "gone-b.jsonl")]  # listed, deleted before the read
    (tmp_path / "compacted.jsonl").write_bytes(b"".join(line(n, f"r{n}", NOW) + b"\n" for n in (2, 3)))

    def read_keys(shards: list[str], expected: list[bytes]) -> None:
        with beam.Pipeline() as pipeline:
            batches = pipeline | ReadResponses(shards) | beam.Values()
            keys = batches | beam.FlatMap(lambda batch: [batch[1][i : i + 32] for i in range(0, len(batch[1]), 32)])
            assert_that(keys, equal_to(expected))  # each once

    read_keys([str(kept), *gone], [raw(1), raw(2), raw(3)])  # the successor read once for both gone shards
    (tmp_path / "compacted.jsonl").unlink()
    read_keys([str(kept)], [raw(1)])
