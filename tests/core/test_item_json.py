"""``item_json`` writes every row exactly as ``json.dumps(item, ensure_ascii=False, default=str)`` would."""

from __future__ import annotations

import datetime
import decimal
import json
import math

import pytest

from beameval.core.records import item_json

ITEMS = [
    {},
    {"id": "q1", "question": "What is the capital of France?", "answer": "Paris"},
    {"text": "naïve café – 東京 🚀", "quote": 'say "hi"\n\ttab\\slash', "control": "\x00\x1f\x7f"},
    {"surrogate": "\ud800 alone", "pair": "\ud83d\ude80"},
    {"int": 2**64, "neg": -3, "float": 0.1, "nan": math.nan, "inf": -math.inf, "bool": True, "none": None},
    {"nested": {"a": [1, 2, {"b": [None, "x"]}], "empty": {}}, "list": [[], [[]]]},
    {"when": datetime.date(2026, 12, 2), "money": decimal.Decimal("1.10"), "bytes": b"\x00\xff"},
    {1: "int key", 2.5: "float key", None: "null key", False: "bool key"},
]


@pytest.mark.parametrize("item", ITEMS, ids=range(len(ITEMS)))
def test_item_json_equals_json_dumps(item: dict) -> None:
    assert item_json(item, None) == json.dumps(item, ensure_ascii=False, default=str)


def test_unparseable_rows_keep_their_raw_text() -> None:
    assert item_json(None, '{"broken": ') == '{"broken": '
    assert item_json(None, None) == ""
