"""The send-time look-up: keys found where the journal wrote them, in this process and from other processes' shards."""

from __future__ import annotations

import hashlib
from pathlib import Path

from beameval.cache.entry import decode_entry, encode_entry, line_key
from beameval.cache.files import LocalFiles
from beameval.cache.in_flight import InFlight
from beameval.cache.journal import JournalWriter
from beameval.cache.journal_index import JournalIndex
from beameval.cache.locations import KeyLocations, location, split_location


def key(number: int) -> str:
    return hashlib.sha256(str(number).encode()).hexdigest()


def reply(text: str) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def test_key_locations_hold_a_hundred_thousand_keys_in_16_bytes_a_slot():
    table = KeyLocations()
    for number in range(100_000):
        table.put(key(number), location(number % 7, number * 100))
    assert len(table) == 100_000
    assert all(split_location(table.get(key(n))) == (n % 7, n * 100) for n in range(0, 100_000, 997))
    assert table.get(key(-1)) is None
    table.put(key(5), 1)  # the first location is kept
    assert split_location(table.get(key(5))) == (5, 500)
    slots = len(table._keys)
    assert 2 * len(table) <= slots <= 4 * len(table)  # 32-64 bytes a key, whatever the table's growth
    assert table._keys.itemsize + table._values.itemsize == 16


def test_this_process_s_answers_are_found_queued_written_and_after_rotation(tmp_path: Path):
    writer = JournalWriter(str(tmp_path), flush_interval=0, max_lines=2)
    for number in range(5):
        writer.record(key(number), reply(f"answer {number}"), "m", f"{number}/0")
    found = writer.answered(key(3))  # still queued: written on the spot, then read back
    assert found is not None and found.response == reply("answer 3") and found.row == "3/0"
    assert len(list(tmp_path.glob("*.jsonl"))) == 1  # rotation happens on the next flush
    writer.record(key(9), reply("nine"), "m")
    writer.flush()
    assert writer.answered(key(9)).row is None  # recorded without a row (the preflight's)
    assert [writer.answered(key(n)).response for n in range(5)] == [reply(f"answer {n}") for n in range(5)]
    assert writer.answered(key(42)) is None
    writer.close()


def test_other_shards_are_indexed_as_they_grow_torn_lines_skipped_ignored_shards_not_read(tmp_path: Path):
    live = tmp_path / "20260101T000000-1-live-00001.jsonl"
    lines = [encode_entry(key(n), reply(str(n)), "m", 1.0, f"{n}/0") for n in range(3)]
    live.write_bytes(lines[0] + lines[1] + lines[2][:20])  # a writer in the middle of its third line
    skipped = tmp_path / "20260101T000000-2-gone-00001.jsonl"
    skipped.write_bytes(encode_entry(key(7), reply("7"), "m", 1.0))
    index = JournalIndex(str(tmp_path), LocalFiles(), refresh_every_s=60.0)
    index.ignore([str(skipped)])
    assert index.refresh() == 2 and index.refresh() == 0  # the second is too soon: nothing listed
    assert index.find(key(1)).response == reply("1") and index.find(key(2)) is None
    assert index.find(key(7)) is None  # read by the graph-time join: not indexed here
    live.write_bytes(lines[0] + lines[1] + lines[2])
    assert index.refresh(force=True) == 1  # only the line finished since
    assert index.find(key(2)).row == "2/0" and len(index) == 3


def test_a_key_sharing_another_s_first_64_bits_is_a_miss_never_the_other_answer(tmp_path: Path):
    first, twin = key(1), key(1)[:16] + key(2)[16:]
    writer = JournalWriter(str(tmp_path), flush_interval=0)
    writer.record(first, reply("first"), "m")
    writer.flush()
    assert writer.answered(twin) is None and writer.answered(first).response == reply("first")
    writer.close()


def test_the_row_field_round_trips_and_leaves_the_key_where_it_was():
    line = encode_entry(key(1), reply("x"), "m", 2.5, "12/3")
    assert line_key(line) == key(1)
    assert decode_entry(line).row == "12/3" and decode_entry(encode_entry(key(1), reply("x"), "m", 2.5)).row is None


def test_in_flight_calls_are_sent_once_and_every_waiter_gets_the_outcome():
    in_flight, sent, got = InFlight(), [], []
    waiter = lambda name: lambda shared: lambda outcome: got.append((name, shared, outcome))  # noqa: E731
    assert in_flight.send_once("k", "1/0", sent.append, waiter("first"))
    assert not in_flight.send_once("k", "1/0", sent.append, waiter("retry"))  # the same row, again
    assert not in_flight.send_once("k", "2/0", sent.append, waiter("repeat"))  # another row, the same request
    assert len(sent) == 1 and len(in_flight) == 1
    sent[0]("answer")
    assert got == [("first", False, "answer"), ("retry", False, "answer"), ("repeat", True, "answer")]
    assert len(in_flight) == 0 and in_flight.send_once("k", "1/0", sent.append, waiter("later"))
