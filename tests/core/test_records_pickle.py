"""The records pickle as their class and field values: every field comes back, nothing shared is lost."""

import copy
import dataclasses
import math
import pickle

import pytest

from beameval.core.records import (
    CallUsage,
    EndpointReply,
    GeneratedRow,
    InferenceInfo,
    InputRow,
    RowFailure,
    ScoredRow,
    replaced,
)

FAILURE = RowFailure("scoring", ["row 3: no"], metric="bleu", not_sent=True, skipped=True)
INFO = InferenceInfo(0.5, 2, 200, 9, 1, "ab12", True, '{"messages": []}')
REPLY = EndpointReply({"output_text": "y"}, None, None, 200, 1, 0.1, 3, 4, None, True)
RECORDS = [
    FAILURE,
    INFO,
    REPLY,
    InputRow(3, {"q": "\ud800"}, "raw", FAILURE, 2, ["note"], "req", {"messages": [1]}, "bad template"),
    CallUsage(1, 2, 3, 4, 5, {"judge": [1, 2, 3]}),
    GeneratedRow(3, {"q": 1}, {"output_text": "x"}, "raw", FAILURE, INFO, {"judge": REPLY}, ["n"], 1, {"b": 2}),
    ScoredRow(
        3,
        '{"q": 1}',
        "x",
        {"em": math.inf},
        FAILURE,
        INFO,
        {"l": "v"},
        {"bleu": [1.0]},
        CallUsage(1),
        ["n"],
        1,
        {"id": None},
        {"q": 1},
    ),
    InputRow(0, None),
    ScoredRow(0, "", None, {}),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_record_comes_back_with_every_field(record):
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(record, protocol))
        assert type(back) is type(record)
        for field in dataclasses.fields(record):  # ScoredRow.item is left out of ==, so field by field
            assert getattr(back, field.name) == getattr(record, field.name), field.name
    deep = copy.deepcopy(record)
    assert deep == record and (not hasattr(record, "notes") or deep.notes is not record.notes)


def test_default_lists_are_not_shared_after_a_round_trip():
    first, second = pickle.loads(pickle.dumps([InputRow(0, {}), InputRow(1, {})]))
    first.notes.append("x")
    assert second.notes == []


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_replaced_is_dataclasses_replace(record):
    names = [field.name for field in dataclasses.fields(record)]
    for changes in ({}, {names[0]: "changed"}, {names[-1]: None, names[1]: ["new"]}):
        before = copy.deepcopy(record)
        fast, slow = replaced(record, **changes), dataclasses.replace(record, **changes)
        assert type(fast) is type(slow)
        for name in names:  # ScoredRow.item is left out of ==, so field by field
            assert getattr(fast, name) == getattr(slow, name), name
        assert fast is not record and record == before  # a copy: the record itself is unchanged


def test_replaced_takes_only_the_row_records():
    with pytest.raises(TypeError, match="row record"):
        replaced(Plain(1))


@dataclasses.dataclass
class Plain:
    """A dataclass that is not a row record."""

    x: int
