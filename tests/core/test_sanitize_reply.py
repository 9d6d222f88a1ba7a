"""A reply's check (``writable_reply``): the nesting limit and lone surrogates found wherever they are."""

import random

import pytest

from beameval.core.sanitize import (
    MAX_NESTING,
    SURROGATE_NOTE,
    RowTooLarge,
    _plainly_clean,
    _rebuild,
    _scan,
    check_row,
    clean_value,
    writable_reply,
)


def nested(levels: int, leaf: object, as_dict: bool = False) -> object:
    value = leaf
    for _ in range(levels - 1):
        value = {"k": value} if as_dict else [value]
    return value


@pytest.mark.parametrize("as_dict", [False, True])
def test_a_reply_may_nest_to_the_limit_and_not_past_it(as_dict):
    reply = nested(MAX_NESTING, [], as_dict)  # the innermost list is level MAX_NESTING
    assert writable_reply(reply, None, None)[0] is reply
    with pytest.raises(RowTooLarge, match=f"nested more than {MAX_NESTING} levels deep"):
        writable_reply(nested(MAX_NESTING + 1, [], as_dict), None, None)
    # A row is held to the same limit, with the same message.
    with pytest.raises(RowTooLarge, match=f"nested more than {MAX_NESTING} levels deep"):
        check_row({"a": nested(MAX_NESTING, [], as_dict)})


@pytest.mark.parametrize(
    ("reply", "cleaned"),
    [
        ({"output_text": "a\ud800"}, {"output_text": "a\ufffd"}),
        ({"r": [{"x": ["ok", "b\udfff"]}]}, {"r": [{"x": ["ok", "b\ufffd"]}]}),
        ({"r": {"\ud801": 1}}, {"r": {"\ufffd": 1}}),
        ({"r": ["ü", 1, None, 2.5]}, None),
    ],
)
def test_lone_surrogates_are_found_at_any_depth_in_values_and_keys(reply, cleaned):
    sample, _, _, notes = writable_reply(reply, 3, 4)
    if cleaned is None:
        assert sample is reply and notes == []
    else:
        assert sample == cleaned and notes == [f"the reply's {SURROGATE_NOTE}"]


def _random_value(rng: random.Random, depth: int) -> object:
    """A JSON-like value with the texts a reply can hold: ASCII, braces, non-ASCII, lone and paired surrogates."""
    kind = rng.random()
    if depth <= 0 or kind < 0.45:
        texts = ["ok", "{[", "ü€", "\ud83d", "\udfff x", "😀", ""]
        return rng.choice([*texts, 7, -(2**70), 2.5e-300, None, True, (1, "\ud800")])
    if kind < 0.75:
        return [_random_value(rng, depth - 1) for _ in range(rng.randrange(4))]
    keys = ["k", "{", "é", "\ud801", "["]
    return {rng.choice(keys): _random_value(rng, depth - 1) for _ in range(rng.randrange(4))}


def test_the_one_pass_check_agrees_with_the_scan_on_every_value():
    """The marshal pass says "clean" only where the exact scan finds nothing and does not raise (else it scans)."""
    rng = random.Random(7)
    cleared = 0
    for _ in range(3000):
        value = _random_value(rng, rng.choice([3, 8]))
        if not isinstance(value, (dict, list)):
            continue
        if rng.random() < 0.1:  # past the nesting limit
            value = nested(MAX_NESTING + rng.randrange(3), value)
        if _plainly_clean(value):
            cleared += 1
            assert _scan(value, cell_limit=None) is False
        try:
            exact = _scan(value, cell_limit=None)
        except RowTooLarge:
            assert not _plainly_clean(value)
            continue
        assert clean_value(value) == ((_rebuild(value), True) if exact else (value, False))
    assert cleared > 300  # the fast answer is the common one


def test_values_marshal_refuses_or_cannot_bound_are_scanned():
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert not _plainly_clean(cyclic)
    assert not _plainly_clean({"a": type("Text", (str,), {})("\ud800")})  # a str subclass: only the scan sees it
    assert clean_value({"a": type("Text", (str,), {})("\ud800")})[1] is True
    braces = {"t": "{" * (MAX_NESTING + 1)}  # many braces in a text: not deep, but the bound cannot tell
    assert not _plainly_clean(braces) and clean_value(braces) == (braces, False)
