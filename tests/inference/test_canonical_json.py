"""``canonical_json`` writes exactly what ``json.dumps`` with its options writes, for every kind of value.

A response key is made of these bytes: one byte of difference between two releases
would turn every stored response into a miss, and every row would be paid for again.
``canonical_json`` writes most bodies with orjson and the rest with ``json``; these tests
compare it with ``json.dumps`` itself over values built to reach every difference
between the two encoders (float forms, NaN, big integers, keys that are not strings,
every kind of character, dates, numbers and containers that only ``json``'s ``default``
knows).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import random
import struct
import uuid
from typing import Any

import numpy as np
import pytest

from beameval.inference.prepared import _json_default, canonical_json


def _reference(value: Any) -> bytes | type[Exception]:
    """What ``json.dumps`` writes with canonical_json's options, or the kind of error it raises."""
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default
        )
        return text.encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        return ValueError if isinstance(exc, ValueError) else type(exc)


def _ours(value: Any) -> bytes | type[Exception]:
    try:
        return canonical_json(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return ValueError if isinstance(exc, ValueError) else type(exc)


def _random_float(rng: random.Random) -> float:
    pick = rng.random()
    if pick < 0.4:  # any bit pattern: subnormals, huge and tiny exponents
        value: float = struct.unpack("d", rng.randbytes(8))[0]
        return 0.5 if math.isnan(value) or math.isinf(value) else value
    if pick < 0.8:  # every power of ten from 1e-30 to 1e30
        return rng.uniform(-10, 10) * 10 ** rng.randint(-30, 30)
    return round(rng.random(), rng.randint(0, 12)) * 10 ** rng.randint(-9, 2)  # short decimals


def _random_text(rng: random.Random) -> str:
    ranges = [(0, 0x20), (0x20, 0x7F), (0x7F, 0xA0), (0xA0, 0x800), (0x2028, 0x202A), (0xE000, 0x10000)]
    chars = []
    for _ in range(rng.randint(0, 12)):
        if rng.random() < 0.1:
            chars.append(chr(rng.randint(0x10000, 0x10FFFF)))
        else:
            low, high = rng.choice(ranges)
            chars.append(chr(rng.randint(low, high - 1)))
    words = ["null", "e-5", "0.00001", '"', "\\", "type-2 "]
    return "".join(chars) + (rng.choice(words) if rng.random() < 0.2 else "")


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random() if depth < 4 else rng.random() * 0.6
    if pick < 0.15:
        return _random_float(rng)
    if pick < 0.25:
        return rng.choice([0, 1, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**64), 10**30, rng.randint(-999, 999)])
    if pick < 0.45:
        return _random_text(rng)
    if pick < 0.6:
        return rng.choice([None, True, False])
    if pick < 0.8:
        return {_random_text(rng): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if pick < 0.95:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return tuple(_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))


def test_random_bodies_are_written_byte_for_byte_as_json_writes_them():
    rng = random.Random(20261207)
    for _ in range(30_000):
        value = {"model": "m", "messages": [{"role": "user", "content": _random_text(rng)}], "x": _random_value(rng)}
        assert _ours(value) == _reference(value), value


def test_every_float_form_is_written_as_json_writes_it():
    rng = random.Random(7)
    floats = [_random_float(rng) for _ in range(200_000)]
    floats += [1e-5, 1e-7, 1e-4, 1.5e-5, 1e16, 1e15, 1e22, 5e-324, -0.0, 0.0, 2.5e-10, 123456789.125]
    for value in floats:
        assert _ours({"t": value}) == _reference({"t": value}), value


class _Colour(enum.Enum):
    RED = "red"


class _Size(enum.IntEnum):
    BIG = 3


class _Mode(enum.StrEnum):
    FAST = "fast"


@dataclasses.dataclass
class _Point:
    x: int


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        -float("inf"),
        [1.0, float("nan")],
        {1: "a"},
        {True: "a"},
        {"a": 1, 2: "b"},
        {None: 1},
        2**64,
        -(2**64) - 1,
        "\ud800 lone surrogate",
        {"\udc00": 1},
        datetime.datetime(2026, 12, 7, 23, 45, 1, 123456),
        datetime.datetime(2026, 12, 7, tzinfo=datetime.timezone.utc),
        datetime.date(2026, 12, 7),
        datetime.time(23, 45),
        decimal.Decimal("0.00001"),
        decimal.Decimal("1.25"),
        b"bytes \xff",
        bytearray(b"ab"),
        {1, 2},
        frozenset({"a"}),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        _Colour.RED,
        _Size.BIG,
        _Mode.FAST,
        _Point(1),
        object(),
        np.float64(1e-05),
        np.float32(0.1),
        np.int64(7),
        np.array([[1, 2], [3, 4]]),
        np.bool_(True),
        [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
    ],
)
def test_values_the_encoders_treat_differently_are_written_as_json_writes_them(value: Any):
    assert _ours({"v": value}) == _reference({"v": value})


def test_nesting_beyond_orjsons_limit_and_cycles():
    deep: Any = "x"
    for _ in range(300):  # orjson refuses past 254 levels; json writes it
        deep = [deep]
    assert _ours(deep) == _reference(deep)
    cycle: list[Any] = []
    cycle.append(cycle)
    assert _ours(cycle) is ValueError and _reference(cycle) is ValueError
