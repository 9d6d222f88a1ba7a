"""The journal: entries as JSON lines, flushed to the OS, rotated, torn last lines ignored; and the entry format."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest

from beameval.cache.entry import (
    KEY_VERSION,
    StoredResponse,
    choose,
    decode_entry,
    encode_entry,
    line_key,
    line_raw_key,
)
from beameval.cache.journal import JournalWriter
from beameval.cache.key import response_key

KEY = response_key("http://h/v1/chat/completions", {"model": "m", "messages": []})
REPLY = {"id": "x", "model": "m", "choices": [{"message": {"role": "assistant", "content": "4 é"}}]}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def read_lines(directory: Path) -> list[bytes]:
    return [line for path in sorted(directory.glob("*.jsonl")) for line in path.read_bytes().splitlines()]


def test_an_entry_line_round_trips_and_its_key_is_read_without_parsing():
    line = encode_entry(KEY, REPLY, "m", 1_700_000_000.5)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    data = json.loads(line)
    assert list(data) == ["key", "v", "model", "recorded_at", "response"]
    assert data == {"key": KEY, "v": KEY_VERSION, "model": "m", "recorded_at": 1_700_000_000.5, "response": REPLY}
    assert line_key(line.rstrip(b"\n")) == KEY
    entry = decode_entry(line)
    assert entry is not None and (entry.key, entry.response, entry.model) == (KEY, REPLY, "m")


def test_a_line_decodes_as_json_loads_reads_it_whatever_follows_the_object():
    """The store's own lines are scanned without ``json.loads``'s wrapper: same entry, same refusals."""
    body = '{"text":"caf\u00e9 \\ud83d","n":[1.5,null]}'.encode()  # a reply's bytes as received: escapes kept
    line = encode_entry(KEY, body, "m", 2.0).rstrip(b"\n")
    for tail, parses in ((b"", True), (b"  \t\r", True), (b" x", False), (b"}", False), (b"{}", False)):
        entry = decode_entry(line + tail)
        assert (entry is not None) is parses, tail
        if parses:
            data = json.loads((line + tail).decode("utf-8", "surrogatepass"))
            assert entry == StoredResponse(KEY, data["response"], "m", 2.0)
    for cut in (1, 8, len(line) - 1):
        assert decode_entry(line[:cut]) is None  # torn anywhere: no value, or an unfinished one


@pytest.mark.parametrize(
    "value",
    [
        b"123456789012345678901234567890",  # beyond 64 bits: exact, not a float
        b"-9223372036854775809",
        b"18446744073709551616",
        b'"\\ud800 lone"',  # a lone surrogate escape
        b"NaN",
        b"-Infinity",
        b"1e400",  # beyond a double: inf, as json reads it
        b"[1.7976931348623157e308, 5e-324, 2.4e-324, 0.1, -0.0, 1E5]",
        b'{"a": 1, "a": 2}',  # the last duplicate wins
        '"caf\u00e9 \U0001f600 \\u00e9"'.encode(),
    ],
)
def test_every_response_value_decodes_as_json_loads_reads_it(value: bytes):
    """The fast parser never changes a value: what it would read otherwise (or refuses) is read by json."""
    line = encode_entry(KEY, b'{"v":' + value + b"}", "m", 3.0).rstrip(b"\n")
    entry = decode_entry(line)
    assert entry is not None
    expected = json.loads(line.decode("utf-8", "surrogatepass"))["response"]["v"]
    assert repr(entry.response["v"]) == repr(expected)  # repr: NaN equals itself, ints stay ints
    assert type(entry.response["v"]) is type(expected)
    bom = decode_entry(codecs.BOM_UTF8 + line)  # another tool's line, with a byte-order mark: json.loads's answer
    assert bom is not None and repr(bom.response) == repr(entry.response)


def test_digits_in_the_key_do_not_send_a_line_to_the_slow_reader():
    """A key is text: a run of 19 digits in it (one line in about 170) is not a number orjson could misread."""
    digits_key = "1234567890123456789012" + "a" * 42
    reply = b'{"n":[1,2],"t":"x"}'
    entry = decode_entry(encode_entry(digits_key, reply, "m", 3.0))
    assert entry is not None and entry.key == digits_key and entry.nesting == 2  # orjson read it
    long_number = decode_entry(encode_entry(digits_key, b'{"n":12345678901234567890123}', "m", 3.0))
    assert long_number is not None and long_number.nesting is None  # json read it: the int is exact
    assert long_number.response["n"] == 12345678901234567890123


def test_torn_lines_and_other_key_versions_yield_nothing():
    line = encode_entry(KEY, REPLY, "m", 1.0).rstrip(b"\n")
    torn = line[: len(line) // 2]
    assert decode_entry(torn) is None and choose([torn]) is None
    other = json.dumps({"key": KEY, "v": KEY_VERSION + 1, "model": "m", "recorded_at": 1.0, "response": {}})
    assert line_key(other.encode()) is None and decode_entry(other) is None
    assert line_key(b"") is None and line_key(b"not json") is None
    # Written by another tool with other key order: still read, by parsing.
    reordered = json.dumps({"response": REPLY, "recorded_at": 2.0, "model": None, "v": KEY_VERSION, "key": KEY})
    assert line_key(reordered.encode()) == KEY


def test_the_raw_key_is_the_hex_key_as_bytes_for_every_kind_of_line():
    line = encode_entry(KEY, REPLY, "m", 1.0).rstrip(b"\n")
    upper = line.replace(KEY.encode(), KEY.upper().encode())
    other = json.dumps({"key": KEY, "v": KEY_VERSION + 1, "model": "m", "recorded_at": 1.0, "response": {}}).encode()
    reordered = json.dumps({"response": REPLY, "recorded_at": 2.0, "model": None, "v": KEY_VERSION, "key": KEY})
    not_hex = json.dumps({"key": "z" * 64, "v": KEY_VERSION, "model": None, "recorded_at": 2.0, "response": {}})
    lines = [line, line[: len(line) // 2], line[:40], upper, other, reordered.encode(), not_hex.encode(), b"", b"x"]
    expected = [bytes.fromhex(KEY), bytes.fromhex(KEY), None, None, None, bytes.fromhex(KEY), None, None, None]
    assert [line_raw_key(each) for each in lines] == expected
    for each in lines[:6]:  # wherever line_key has an answer, the raw key is its bytes
        key = line_key(each)
        assert line_raw_key(each) == (None if key is None else bytes.fromhex(key))


def test_choose_picks_the_earliest_parsable_copy_in_any_order():
    early = encode_entry(KEY, {"n": 1}, "m", 10.0)
    late = encode_entry(KEY, {"n": 2}, "m", 20.0)
    torn = early[:30]
    for lines in ([early, late, torn], [torn, late, early], [late, early]):
        chosen = choose(lines)
        assert chosen is not None and chosen.response == {"n": 1}
    same_time = [encode_entry(KEY, {"n": 3}, "m", 5.0), encode_entry(KEY, {"n": 4}, "m", 5.0)]
    assert choose(same_time) == choose(list(reversed(same_time)))


def test_flush_writes_every_recorded_entry_and_rotation_closes_shards(tmp_path: Path):
    clock = Clock()
    writer = JournalWriter(str(tmp_path / "j"), flush_interval=0, rotate_after_s=10, max_lines=3, clock=clock)
    for index in range(4):
        writer.record(f"{index:064x}", {"i": index}, "m")
    assert not (tmp_path / "j").exists()  # nothing is written until the flush
    writer.flush()
    # Flushed to the OS: another reader sees all four lines while the shard is still open.
    lines = read_lines(tmp_path / "j")
    assert [json.loads(line)["response"] for line in lines] == [{"i": i} for i in range(4)]
    assert len(writer.shards) == 1  # four lines in one write, then closed (max_lines reached)
    writer.record(f"{5:064x}", {"i": 5}, "m")
    writer.flush()
    assert len(writer.shards) == 2
    clock.now += 11  # the open shard is now older than rotate_after_s
    writer.record(f"{6:064x}", {"i": 6}, "m")
    writer.flush()
    writer.record(f"{7:064x}", {"i": 7}, "m")
    writer.flush()
    assert len(writer.shards) == 3
    writer.close()
    assert [json.loads(line)["response"]["i"] for line in read_lines(tmp_path / "j")] == [0, 1, 2, 3, 5, 6, 7]
    assert all(json.loads(line)["recorded_at"] >= 1_700_000_000.0 for line in read_lines(tmp_path / "j"))
    writer.record(f"{8:064x}", {"i": 8}, "m")  # after close: ignored, never raises
    assert writer.recorded == 7


def test_shard_names_are_unique_per_writer(tmp_path: Path):
    first = JournalWriter(str(tmp_path), flush_interval=0)
    second = JournalWriter(str(tmp_path), flush_interval=0)
    for writer in (first, second):
        writer.record(KEY, REPLY, "m")
        writer.close()
    assert len({Path(p).name for p in first.shards + second.shards}) == 2
    assert len(read_lines(tmp_path)) == 2


def test_the_background_thread_flushes_without_being_asked(tmp_path: Path):
    import threading

    flushed = threading.Event()
    writer = JournalWriter(str(tmp_path), flush_interval=0.01)
    original = writer.flush

    def flush() -> None:
        original()
        if writer.recorded:
            flushed.set()

    writer.flush = flush  # type: ignore[method-assign]
    writer.record(KEY, REPLY, "m")
    assert flushed.wait(5)
    assert len(read_lines(tmp_path)) == 1
    writer.close()


def test_shared_writers_are_per_directory_and_close_all_flushes(tmp_path: Path):
    one = JournalWriter.shared(str(tmp_path / "a"))
    assert JournalWriter.shared(str(tmp_path / "a")) is one
    other = JournalWriter.shared(str(tmp_path / "b"))
    assert other is not one
    one.record(KEY, REPLY, "m")
    JournalWriter.close_all()
    assert len(read_lines(tmp_path / "a")) == 1
    assert JournalWriter.shared(str(tmp_path / "a")) is not one
    JournalWriter.close_all()


def test_a_reply_body_as_received_is_stored_as_it_is_when_it_fits_on_a_line():
    raw = json.dumps(REPLY, ensure_ascii=False).encode()  # the server's spacing, not ours
    line = encode_entry(KEY, raw, "m", 5.0)
    assert line.endswith(b'"response":' + raw + b"}\n")
    entry = decode_entry(line)
    assert entry is not None and entry.response == REPLY and line_key(line.rstrip(b"\n")) == KEY


def test_a_reply_body_that_does_not_fit_on_a_line_is_encoded_again():
    pretty = json.dumps(REPLY, indent=2).encode()  # line breaks between tokens
    latin = b'{"text": "caf\xe9"}'  # not UTF-8: json.loads refuses it (so no handler parsed it either)
    bom = b"\xef\xbb\xbf" + json.dumps(REPLY).encode()
    for body in (pretty, bom):
        line = encode_entry(KEY, body, "m", 5.0)
        assert line.count(b"\n") == 1 and b"\xef\xbb\xbf" not in line
        entry = decode_entry(line)
        assert entry is not None and entry.response == REPLY
    with pytest.raises(ValueError):
        encode_entry(KEY, latin, "m", 5.0)
