"""The store's hits in row batches: LookupResponses(batched) on a real Beam runner, then AnswerHits."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beameval.cache.entry import encode_entry, pack_bytes
from beameval.cache.key import prepared_key
from beameval.config.schema import parse_config
from beameval.core.prompt import render_prompt
from beameval.core.records import GeneratedRow, InputRow, RowFailure
from beameval.core.templates import Template
from beameval.inference.prepared import wire_bytes
from beameval.inference.targets import make_handler
from transforms.cache import STORED, AnswerHits, LookupResponses, StoredHits, target_request
from transforms.row_batches import RowBatch
from transforms.store_join import ReadResponses

CONFIG = {
    "dataset": {"path": "unused.jsonl"},
    "target": {"model": {"url": "http://127.0.0.1:9/v1", "name": "m", "format": "openai"}},
    "prompt_template": {"messages": [{"role": "user", "content": "{{ item.q }}"}]},
    "metrics": [{"type": "exact-match", "reference": "{{ item.a }}"}],
}
#: Rows 0-3 are stored (row 3's answer holds a lone surrogate, as a raw reply can); 4 and 5 are not; 6 did not read.
ANSWERS = {0: "zero", 1: "one", 2: "two", 3: "bad \ud83d here"}


def _reply(content: str) -> bytes:
    """The reply's body as received: JSON, its lone surrogate an escape."""
    message = {"role": "assistant", "content": content}
    reply = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}
    return json.dumps(reply).encode()


def _rows(tmp_path: Path) -> tuple[list[InputRow], dict[int, str], Path]:
    """The rendered rows, each stored row's request body as sent, and the store's one shard."""
    config = parse_config(CONFIG)
    assert config.target is not None
    handler = make_handler(config.target, config.params, None)
    template = Template(CONFIG["prompt_template"], "prompt_template")
    rows = [render_prompt(template, InputRow(i, {"q": f"question {i}", "a": "x"})) for i in range(6)]
    rows.append(InputRow(6, None, raw="{not json", failure=RowFailure("input", ["row 6: not JSON"])))
    shard = tmp_path / "entries" / "s-00000.jsonl"
    shard.parent.mkdir()
    bodies, lines = {}, []
    for row in rows[:6]:
        prepared = target_request(handler, row)
        bodies[row.row_index] = wire_bytes(prepared).decode("utf-8")
        if row.row_index in ANSWERS:
            lines.append(encode_entry(prepared_key(prepared), _reply(ANSWERS[row.row_index]), "m", time.time()))
    shard.write_bytes(b"".join(lines))
    return rows, bodies, shard


@pytest.mark.parametrize("in_batches", [False, True], ids=["rows", "row-batches"])
def test_hits_skip_generation_in_lists_and_become_one_row_batch_each(tmp_path: Path, in_batches: bool):
    rows, bodies, shard = _rows(tmp_path)
    prompts = {row.row_index: row.prompt for row in rows}
    # Read in batches, the rows of each batch mix hits and misses (a batch of 3, then one of 4).
    elements = [RowBatch(rows[:3]), RowBatch(rows[3:])] if in_batches else rows
    with beam.Pipeline() as pipeline:
        stored = pipeline | "ReadResponses" >> ReadResponses([str(shard)])
        lookup = LookupResponses(parse_config(CONFIG), stored, batched=True, rows_in_batches=in_batches)
        looked = pipeline | beam.Create(elements) | lookup
        # A miss to send has its prompt again (rows cross the join without it), the same as rendered.
        misses = looked.misses | "Misses" >> beam.Map(
            lambda r: (r.row_index, r.prompt == prompts[r.row_index], r.request)
        )
        expected_misses = [(4, True, bodies[4]), (5, True, bodies[5]), (6, True, None)]
        assert_that(misses, equal_to(expected_misses), label="CheckMisses")
        # Each element of the STORED output is one bucket's hits, never a row.
        kinds = looked[STORED] | "Kinds" >> beam.Map(lambda hits: isinstance(hits, StoredHits) and any(hits.hits()))
        assert_that(kinds | "All" >> beam.combiners.ToList(), lambda found: _all_true(found), label="CheckKinds")
        answered = looked[STORED] | "AnswerHits" >> beam.ParDo(AnswerHits())
        batches = answered | "Batches" >> beam.Map(lambda batch: isinstance(batch, RowBatch))
        assert_that(batches | "Every" >> beam.combiners.ToList(), lambda found: _all_true(found), label="CheckBatch")
        written = answered | "Rows" >> beam.FlatMap(lambda batch: [_written(row) for row in batch])
        expected = [(i, True, bodies[i], ANSWERS[i], False) for i in range(3)]
        expected.append((3, True, bodies[3], "bad \ufffd here", True))  # cleaned, with a note, as a fresh reply
        assert_that(written, equal_to(expected), label="CheckRows")


def _stored_hits(hits: list[tuple[str, dict[str, Any], tuple[Any, ...]]]) -> StoredHits:
    """``StoredHits`` of ``(request_hash, reply, row fields)``, the rows packed as they cross the join."""
    rows = pack_bytes(pickle.dumps([(digest, fields) for digest, _reply, fields in hits], pickle.HIGHEST_PROTOCOL))
    return StoredHits.of(rows, [reply for _digest, reply, _fields in hits])


def test_stored_hits_pickle_compressed_and_whole():
    hits = [("ab" * 32, {"output_text": f"bad \ud83d {i} " * 50}, (i, {"q": "x"}, None)) for i in range(4)]
    encoded = pickle.dumps(_stored_hits(hits), pickle.HIGHEST_PROTOCOL)
    back = pickle.loads(encoded)
    assert type(back) is StoredHits and list(back.hits()) == hits  # the lone surrogate survives
    assert len(encoded) < len(pickle.dumps(hits, pickle.HIGHEST_PROTOCOL)) / 3


def test_stored_hits_keep_every_reply_value_and_type_and_pickle_what_marshal_refuses():
    """Replies go by marshal, rows by pickle: each value comes back equal and of its type, in its hit."""
    import datetime
    import decimal

    reply = {
        "output_text": "caf\u00e9 \ud83d\ude00 \ud800",
        "response": {"n": [1, -(2**70), 0.1, 1e308, -0.0, True, False, None], "nested": [[[{"k": ""}]]]},
        "usage": {"prompt_tokens": 9, "completion_tokens": None},
    }
    item = {"when": datetime.date(2024, 1, 2), "price": decimal.Decimal("1.10"), "blob": b"\x00\xff", "arr": (1, 2)}
    hits = [("cd" * 32, reply, (0, item, None)), ("ef" * 32, {"output_text": "x"}, (1, {"q": "y"}, None))]
    back = pickle.loads(pickle.dumps(_stored_hits(hits), pickle.HIGHEST_PROTOCOL))
    assert type(back) is StoredHits and back.marshalled and list(back.hits()) == hits
    assert repr(list(back.hits())) == repr(hits)  # the same types throughout (a bool stays a bool, -0.0 negative)
    odd = [("ab" * 32, {"output_text": "z", "extra": decimal.Decimal("2")}, (2, {"q": "z"}, None))]
    back = pickle.loads(pickle.dumps(_stored_hits(odd), pickle.HIGHEST_PROTOCOL))
    assert not back.marshalled and repr(list(back.hits())) == repr(odd)  # marshal refuses a Decimal: pickled


def test_a_sent_row_passes_answer_hits_unchanged_as_a_batch_of_one():
    row = GeneratedRow(0, {"q": "x"}, {"output_text": "y"})
    (batch,) = AnswerHits().process(row)
    assert type(batch) is RowBatch and batch == [row] and batch[0] is row


def _written(row: GeneratedRow) -> tuple[int, bool, str | None, str, bool]:
    assert row.inference is not None and row.failure is None
    return row.row_index, row.inference.cached, row.inference.request, row.sample["output_text"], bool(row.notes)


def _all_true(found: list[bool]) -> None:
    assert found and all(found), found
