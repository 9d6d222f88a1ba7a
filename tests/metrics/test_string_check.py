"""string-check: every operator spelling, case-sensitivity, operand rendering, config errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from beameval.core.errors import TemplateError
from beameval.metrics.string_check import OPERATIONS

# (operation, left, right, expected)
CASES = [
    ("equals", "abc", "abc", 1.0),
    ("equals", "abc", "ABC", 0.0),  # case-sensitive
    ("equals", "abc ", "abc", 0.0),  # no normalisation
    ("==", "abc", "abc", 1.0),
    ("==", "abc", "abd", 0.0),
    ("!=", "abc", "abd", 1.0),
    ("!=", "abc", "abc", 0.0),
    ("<>", "abc", "ABC", 1.0),
    ("<>", "abc", "abc", 0.0),
    ("not equals", "x", "y", 1.0),
    ("not equals", "x", "x", 0.0),
    ("contains", "the quick fox", "quick", 1.0),  # right in left
    ("contains", "quick", "the quick fox", 0.0),  # not left in right
    ("contains", "Quick", "quick", 0.0),
    ("contains", "anything", "", 1.0),
    ("not contains", "the quick fox", "slow", 1.0),
    ("not contains", "the quick fox", "fox", 0.0),
    ("startswith", "prefix-rest", "prefix", 1.0),
    ("startswith", "prefix-rest", "rest", 0.0),
    ("endswith", "prefix-rest", "rest", 1.0),
    ("endswith", "prefix-rest", "prefix", 0.0),
    ("equals", "", "", 1.0),
    ("equals", "café", "cafe\u0301", 0.0),  # no unicode normalisation either
    ("contains", "naïve café", "ïve", 1.0),
]


def test_every_spelling_is_covered() -> None:
    assert {case[0] for case in CASES} == set(OPERATIONS)
    assert set(OPERATIONS) == {
        "equals", "==", "!=", "<>", "not equals",
        "contains", "not contains", "startswith", "endswith",
    }  # fmt: skip


@pytest.mark.parametrize(("operation", "left", "right", "expected"), CASES)
def test_operation(build, row, operation: str, left: str, right: str, expected: float) -> None:
    metric = build(
        "string-check",
        operation=operation,
        left_template="{{ sample.output_text }}",
        right_template="{{ item.expected }}",
    )
    assert metric.output_names() == ["string-check"]
    assert metric.score(row({"expected": right}, output_text=left)) == {"string-check": expected}


def test_numbers_render_as_text(build, row) -> None:
    metric = build("string-check", operation="equals", left_template="{{ a }}", right_template="{{ b }}")
    assert metric.score(row({"a": 42, "b": "42"})) == {"string-check": 1.0}
    assert metric.score(row({"a": 1.5, "b": "1.50"})) == {"string-check": 0.0}


def test_constant_and_mixed_templates(build, row) -> None:
    metric = build(
        "string-check",
        operation="startswith",
        left_template="Answer: {{ item.answer }}",
        right_template="Answer: ",
    )
    assert metric.score(row({"answer": "yes"})) == {"string-check": 1.0}


def test_non_text_operand_is_a_template_error(build, row) -> None:
    metric = build("string-check", operation="contains", left_template="{{ a }}", right_template="x")
    with pytest.raises(TemplateError, match="left operand must be text.*rendered a list"):
        metric.score(row({"a": ["x"]}))


def test_missing_field_is_a_template_error(build, row) -> None:
    metric = build("string-check", operation="equals", left_template="{{ item.a }}", right_template="x")
    with pytest.raises(TemplateError, match="'a'"):
        metric.score(row({"b": 1}))


def test_unknown_operation_lists_the_valid_ones(build) -> None:
    with pytest.raises(ValidationError) as err:
        build("string-check", operation="EQUALS", left_template="a", right_template="b")
    message = str(err.value)
    assert "unknown string-check operation 'EQUALS'" in message
    for operation in OPERATIONS:
        assert repr(operation) in message


@pytest.mark.parametrize("missing", ["operation", "left_template", "right_template"])
def test_required_fields(build, missing: str) -> None:
    fields = {"operation": "equals", "left_template": "a", "right_template": "b"}
    del fields[missing]
    with pytest.raises(ValidationError, match=missing):
        build("string-check", **fields)


def test_greater_than_is_not_a_string_operation(build) -> None:
    with pytest.raises(ValidationError, match="unknown string-check operation '>'"):
        build("string-check", operation=">", left_template="a", right_template="b")
