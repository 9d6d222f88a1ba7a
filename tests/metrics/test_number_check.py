"""number-check: the reference's number parsing, every comparator spelling, epsilon rules."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from beameval.metrics.number_check import OPERATIONS, parse_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42),
        ("-7", -7),
        ("+3", 3),
        ("3.14", 3.14),
        ("-0.5", -0.5),
        ("-.5", -0.5),
        (".5", 0.5),
        ("5.", 5),  # a match must end with a digit
        ("007", 7),
        ("The answer is 12, not 13", 13),  # the last number wins
        ("1,234", 234),  # commas split numbers (reference behaviour)
        ("1,234.5", 234.5),
        ("1e5", 5),  # no exponent support
        ("1e+20", 20),  # str(1e20)
        ("2-3", -3),
        ("version 1.2", 1.2),
        ("x = ٣", 3),  # \d is Unicode-aware, as in the reference
        ("no digits here", None),
        ("", None),
        ("12345678901234567890123", 12345678901234567890123),  # ints are exact
    ],
)
def test_parse_number(text: str, expected: float | None) -> None:
    value = parse_number(text)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("text", ["1.2.3", "v10.0.1", "..5"])
def test_several_dots_parse_as_nan(text: str) -> None:
    value = parse_number(text)
    assert isinstance(value, float)
    assert math.isnan(value)


# (operation, left, right, expected) with numbers that differ, are equal, and order both ways
CASES = [
    ("equals", "5", "5.0", 1.0),
    ("equals", "5", "6", 0.0),
    ("==", "x=-2", "-2", 1.0),
    ("==", "2", "-2", 0.0),
    ("!=", "1", "2", 1.0),
    ("!=", "2", "2", 0.0),
    ("<>", "1", "2", 1.0),
    ("<>", "2.0", "2", 0.0),
    ("not equals", "1", "2", 1.0),
    ("not equals", "2", "2", 0.0),
    (">=", "3", "3", 1.0),
    (">=", "2", "3", 0.0),
    ("gte", "4", "3", 1.0),
    ("gte", "2.99", "3", 0.0),
    ("greater than or equal", "3", "3.0", 1.0),
    ("greater than or equal", "-4", "-3", 0.0),
    (">", "4", "3", 1.0),
    (">", "3", "3", 0.0),
    ("gt", "0.1", "0", 1.0),
    ("gt", "-1", "0", 0.0),
    ("greater than", "10", "9.5", 1.0),
    ("greater than", "9", "9.5", 0.0),
    ("<=", "3", "3", 1.0),
    ("<=", "4", "3", 0.0),
    ("lte", "-5", "-4", 1.0),
    ("lte", "5", "4", 0.0),
    ("less than or equal", "1.5", "1.5", 1.0),
    ("less than or equal", "1.6", "1.5", 0.0),
    ("<", "1", "2", 1.0),
    ("<", "2", "2", 0.0),
    ("lt", "-2", "-1", 1.0),
    ("lt", "-1", "-2", 0.0),
    ("less than", "0", "0.5", 1.0),
    ("less than", "0.5", "0", 0.0),
]


def _metric(build, operation: str, epsilon: float | None = None):
    fields = {"operation": operation, "left_template": "{{ left }}", "right_template": "{{ right }}"}
    if epsilon is not None:
        fields["epsilon"] = epsilon
    return build("number-check", **fields)


def test_every_spelling_is_covered() -> None:
    assert {case[0] for case in CASES} | {"absolute difference"} == set(OPERATIONS)
    assert len(OPERATIONS) == 18


@pytest.mark.parametrize(("operation", "left", "right", "expected"), CASES)
def test_comparator(build, row, operation: str, left: str, right: str, expected: float) -> None:
    metric = _metric(build, operation)
    assert metric.output_names() == ["number-check"]
    assert metric.score(row({"left": left, "right": right})) == {"number-check": expected}


@pytest.mark.parametrize(
    ("left", "right", "epsilon", "expected"),
    [
        ("1.0", "1.05", 0.1, 1.0),
        ("1.0", "1.2", 0.1, 0.0),
        ("-3", "3", 6, 1.0),  # the bound is inclusive
        ("-3", "3", 5.999, 0.0),
        ("7", "7", 0, 1.0),  # epsilon 0 means exact equality
        ("7", "7.5", 0, 0.0),
    ],
)
def test_absolute_difference(build, row, left, right, epsilon, expected) -> None:
    metric = _metric(build, "absolute difference", epsilon)
    assert metric.score(row({"left": left, "right": right})) == {"number-check": expected}


def test_operands_are_rendered_then_str_ed(build, row) -> None:
    metric = _metric(build, "equals")
    assert metric.score(row({"left": 42, "right": "The answer is 42."})) == {"number-check": 1.0}
    assert metric.score(row({"left": 2.5, "right": "2.50"})) == {"number-check": 1.0}
    assert metric.score(row({"left": [1, 2], "right": "2"})) == {"number-check": 1.0}  # "[1, 2]"
    assert metric.score(row({"left": 1e20, "right": "20"})) == {"number-check": 1.0}
    assert metric.score(row({"left": "1,234", "right": "234"})) == {"number-check": 1.0}


@pytest.mark.parametrize(("left", "right"), [("no number", "5"), ("5", ""), (None, "5"), (True, "1")])
def test_no_number_gives_nan_not_an_error(build, row, left, right) -> None:
    for operation in OPERATIONS:
        metric = _metric(build, operation, 1.0 if operation == "absolute difference" else None)
        result = metric.score(row({"left": left, "right": right}))
        assert list(result) == ["number-check"]
        assert math.isnan(result["number-check"])


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_several_dots_compare_as_nan(build, row, operation: str) -> None:
    metric = _metric(build, operation, 1.0 if operation == "absolute difference" else None)
    result = metric.score(row({"left": "1.2.3", "right": "1"}))
    assert math.isnan(result["number-check"])  # the reference's rule: an unparseable side is NaN


def test_unknown_operation_lists_the_valid_ones(build) -> None:
    with pytest.raises(ValidationError) as err:
        _metric(build, "approximately")
    message = str(err.value)
    assert "unknown number-check operation 'approximately'" in message
    for operation in OPERATIONS:
        assert repr(operation) in message


def test_absolute_difference_requires_epsilon(build) -> None:
    with pytest.raises(ValidationError, match="'absolute difference' requires 'epsilon'"):
        _metric(build, "absolute difference")


@pytest.mark.parametrize("epsilon", [-0.1, math.nan])
def test_epsilon_must_be_non_negative(build, epsilon: float) -> None:
    with pytest.raises(ValidationError, match="'epsilon' must be >= 0"):
        _metric(build, "absolute difference", epsilon)


@pytest.mark.parametrize("operation", sorted(set(OPERATIONS) - {"absolute difference"}))
def test_non_zero_epsilon_is_rejected_for_other_operations(build, operation: str) -> None:
    with pytest.raises(ValidationError, match="only used by 'absolute difference'"):
        _metric(build, operation, 0.5)
    _metric(build, operation, 0)  # zero is accepted, like the reference
    _metric(build, operation)
