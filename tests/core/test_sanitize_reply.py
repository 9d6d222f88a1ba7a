"""A reply's check (``writable_reply``): the nesting limit and lone surrogates found wherever they are."""

import pytest

from beameval.core.sanitize import MAX_NESTING, SURROGATE_NOTE, RowTooLarge, check_row, writable_reply


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
