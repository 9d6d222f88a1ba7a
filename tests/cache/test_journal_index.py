"""The send-time look-up: keys found where the journal wrote them, in this process and from other processes' shards."""

from __future__ import annotations

import hashlib
from pathlib import Path

from beameval.cache.entry import decode_entry, encode_entry, line_key, line_row
from beameval.cache.files import LocalFiles
from beameval.cache.in_flight import InFlight
from beameval.cache.journal import JournalWriter
from beameval.cache.journal_index import JournalIndex, _slot
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


def test_this_process_s_answers_are_found_by_key_and_row_queued_written_and_after_rotation(tmp_path: Path):
    writer = JournalWriter(str(tmp_path), flush_interval=0, max_lines=2)
    for number in range(5):
        writer.record(key(number), reply(f"answer {number}"), "m", f"{number}/0")
    found = writer.answered(key(3), "3/0")  # still queued: written on the spot, then read back
    assert found is not None and found.response == reply("answer 3") and found.row == "3/0"
    assert len(list(tmp_path.glob("*.jsonl"))) == 1  # rotation happens on the next flush
    writer.record(key(9), reply("nine"), "m")  # no row (the preflight's answer): not for a retry
    writer.flush()
    assert writer.answered(key(9), "9/0") is None
    assert [writer.answered(key(n), f"{n}/0").response for n in range(5)] == [reply(f"answer {n}") for n in range(5)]
    assert writer.answered(key(1), "2/0") is None  # another row asking the same is sent, as without retries
    assert writer.answered(key(42), "42/0") is None
    writer.close()


def test_other_shards_are_indexed_as_they_grow_torn_lines_skipped_ignored_shards_not_read(tmp_path: Path):
    live = tmp_path / "20260101T000000-1-live-00001.jsonl"
    lines = [encode_entry(key(n), reply(str(n)), "m", 1.0, f"{n}/0") for n in range(3)]
    live.write_bytes(lines[0] + lines[1] + lines[2][:20])  # a writer in the middle of its third line
    skipped = tmp_path / "20260101T000000-2-gone-00001.jsonl"
    skipped.write_bytes(encode_entry(key(7), reply("7"), "m", 1.0, "7/0"))
    index = JournalIndex(str(tmp_path), LocalFiles(), refresh_every_s=60.0)
    index.ignore([str(skipped)])
    assert index.refresh() == 2 and index.refresh() == 0  # the second is too soon: nothing listed
    assert index.find(key(1), "1/0").response == reply("1") and index.find(key(2), "2/0") is None
    assert index.find(key(7), "7/0") is None  # read by the graph-time join: not indexed here
    live.write_bytes(lines[0] + lines[1] + lines[2])
    assert index.refresh(force=True) == 1  # only the line finished since
    assert index.find(key(2), "2/0").row == "2/0" and len(index) == 3


def test_a_slot_clash_is_a_miss_never_another_answer(tmp_path: Path):
    writer = JournalWriter(str(tmp_path), flush_interval=0)
    writer.record(key(1), reply("first"), "m", "1/0")
    writer.flush()
    index = writer.index
    index._locations.put(_slot(key(2), "2/0"), index._locations.get(_slot(key(1), "1/0")))  # as if they clashed
    assert writer.answered(key(2), "2/0") is None and writer.answered(key(1), "1/0").response == reply("first")
    writer.close()


def test_the_row_field_round_trips_and_leaves_the_key_where_it_was():
    line = encode_entry(key(1), reply("x"), "m", 2.5, "12/3")
    assert line_key(line) == key(1) and line_row(line) == "12/3"
    assert decode_entry(line).row == "12/3"
    plain = encode_entry(key(1), reply("x"), "m", 2.5)
    assert decode_entry(plain).row is None and line_row(plain) is None


def test_in_flight_calls_are_sent_once_per_row_and_every_waiter_gets_the_outcome():
    in_flight, sent, got = InFlight(), [], []
    assert in_flight.send_once("k", "1/0", sent.append, lambda outcome: got.append(("first", outcome)))
    assert not in_flight.send_once("k", "1/0", sent.append, lambda outcome: got.append(("retry", outcome)))
    assert in_flight.send_once("k", "2/0", sent.append, lambda outcome: got.append(("other row", outcome)))
    assert len(sent) == 2 and len(in_flight) == 2
    sent[0]("answer")
    sent[1]("its own")
    assert got == [("first", "answer"), ("retry", "answer"), ("other row", "its own")]
    assert len(in_flight) == 0 and in_flight.send_once("k", "1/0", sent.append, got.append)
