"""One bad value never takes the run down: it is cleaned (and noted) or fails its own row; every other row is ok."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from beameval.core.records import GeneratedRow, InferenceInfo, ScoredRow
from beameval.core.sanitize import MAX_NESTING, check_row, clean_count, writable_reply
from transforms.score import ScoreRows
from transforms.write import _ToArrowBatches, rows_schema

EXACT = [{"type": "exact-match", "reference": "{{ item.answer }}"}]
PROMPT = {"messages": [{"role": "user", "content": "{{ item.question }}"}]}


def _deep(levels: int) -> str:
    return '{"question": "deep", "answer": "deep", "nest": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.slow
def test_surrogates_huge_counts_and_deep_rows_fail_or_are_cleaned_alone(
    tmp_path: Path, hostile, hostile_target, run_eval
):
    hostile.script["SURROGATE"] = hostile.reply_with('"emoji cut in half \\ud83d"')
    hostile.script["HUGE"] = hostile.reply_with(
        '"HUGE usage"', '{"prompt_tokens": 18446744073709551616, "completion_tokens": 2}'
    )
    lines = [
        '{"question": "plain one", "answer": "plain one"}',
        '{"question": "last \\ud800", "answer": "last"}',  # a lone surrogate in the dataset itself
        '{"question": "SURROGATE reply", "answer": "x"}',
        '{"question": "HUGE usage", "answer": "HUGE usage"}',
        _deep(900),
        _deep(10_000),
        '{"question": "plain two", "answer": "plain two"}',
    ]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n")
    config = {
        "dataset": {"path": str(data)},
        "target": hostile_target(),
        "prompt_template": PROMPT,
        "params": {"ignore_request_failure": True, "max_retries": 0},
        "metrics": EXACT,
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    rows = result.rows
    assert [r["status"] for r in rows] == ["ok", "ok", "ok", "ok", "error", "error", "ok"]
    assert result.results["counts"] == {"rows": 7, "ok": 5, "errors": 2} | {
        k: v for k, v in result.results["counts"].items() if k not in ("rows", "ok", "errors")
    }
    # The dataset's lone surrogate became U+FFFD, in the stored item and in what was sent (echoed back).
    assert '"last \ufffd"' in rows[1]["item"] and rows[1]["output_text"] == "last \ufffd"
    assert "surrogates" in rows[1]["notes"]
    # The reply cut mid-emoji is kept with U+FFFD, noted, and scored.
    assert rows[2]["output_text"] == "emoji cut in half \ufffd" and "reply's invalid UTF-16" in rows[2]["notes"]
    assert rows[2]["exact-match.exact-match"] == 0.0
    # 2**64 prompt tokens: stored as null with a note; the answer itself is fine.
    assert rows[3]["prompt_tokens"] is None and rows[3]["completion_tokens"] == 2
    assert "usage.prompt_tokens was 18446744073709551616, outside the 64-bit range" in rows[3]["notes"]
    assert rows[3]["exact-match.exact-match"] == 1.0
    assert rows[0]["notes"] is None and rows[6]["exact-match.exact-match"] == 1.0
    # Deep rows are failed input rows, in errors/ with the documented limit, and never sent.
    errors = result.errors
    assert [e["row_index"] for e in errors] == [4, 5]
    assert all(e["phase"] == "input" for e in errors)
    assert all(f"nested more than {MAX_NESTING} levels deep" in e["error"] for e in errors)
    assert hostile.seen["deep"] == 0
    assert math.isnan(rows[4]["exact-match.exact-match"])
    # The usage sums skip the null count: 4 replies x 3 prompt tokens (the script's usage).
    assert result.results["usage"]["prompt_tokens"] == 4 * 3
    assert result.score("exact-match.exact-match")["nan_count"] == 2


def test_check_row_limits_and_cleaning():
    deep: dict = {}
    node = deep
    for _ in range(MAX_NESTING - 1):
        node["a"] = {}
        node = node["a"]
    assert check_row(deep) == (deep, [])  # exactly at the limit: kept as it is (no copy)
    node["a"] = {}
    with pytest.raises(ValueError, match="nested more than 100"):
        check_row(deep)
    cleaned, notes = check_row({"k\udc00": ["ok", "x\ud83d"]})
    assert cleaned == {"k\ufffd": ["ok", "x\ufffd"]} and len(notes) == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        (2**63 - 1, 2**63 - 1),
        (2**63, None),
        (2**64, None),
        (-1, None),
        ("12", None),
        (True, None),
        (None, None),
    ],
)
def test_token_counts_are_64_bit_or_null(value, expected):
    count, note = clean_count(value, "usage.prompt_tokens")
    assert count == expected
    assert (note is None) == (value is None or expected is not None)


def test_writable_reply_refuses_a_reply_nested_past_the_limit():
    reply = {"output_text": "x", "response": {"a": [[[]]]}}
    assert writable_reply(reply, 1, 2) == (reply, 1, 2, [])
    nested: list = []
    for _ in range(MAX_NESTING + 5):
        nested = [nested]
    with pytest.raises(ValueError, match="nested more than"):
        writable_reply({"output_text": "x", "response": nested}, 1, 2)


def test_score_rows_turns_an_unexpected_exception_into_a_failed_row_with_phase_and_cause():
    fn = ScoreRows([])
    fn.setup()
    broken = GeneratedRow(0, {"q": "a"}, ["not", "a", "dict"])  # a sample no scorer expects: .get raises
    outputs = list(fn.process(broken))
    scored = outputs[0]
    assert isinstance(scored, ScoredRow) and scored.failure is not None
    assert scored.failure.phase == "scoring"
    assert "ScoreRows failed unexpectedly (AttributeError" in scored.failure.text
    assert '"phase": "scoring"' in outputs[1].value  # and its errors/ record


def test_to_arrow_keeps_the_batch_and_fails_only_the_row_arrow_refuses():
    schema = rows_schema(["m.s"], [])
    fn = _ToArrowBatches(schema, [])
    fn.start_bundle()
    good = ScoredRow(0, "{}", "a", {"m.s": 1.0})
    bad = ScoredRow(1, "{}", "b", {"m.s": 1.0}, inference=InferenceInfo(attempts=2**70))  # not an int64
    also_good = ScoredRow(2, "{}", "c", {"m.s": 0.5})
    broken = ScoredRow(3, "{}", "d", None)  # no scores mapping: building the record itself raises
    for row in (good, bad, also_good, broken):
        list(fn.process(row))
    (table,) = [v.value for v in fn.finish_bundle()]
    assert isinstance(table, pa.Table)
    records = table.to_pylist()
    assert [(r["row_index"], r["status"]) for r in records] == [(0, "ok"), (1, "error"), (2, "ok"), (3, "error")]
    assert "WriteRows failed unexpectedly (TypeError" in records[3]["error"]
    assert "WriteRows failed unexpectedly" in records[1]["error"] and math.isnan(records[1]["m.s"])
    assert records[2]["output_text"] == "c" and records[2]["m.s"] == 0.5
