"""exact-match, and the candidate/reference operand rules shared by the text metrics."""

from __future__ import annotations

import pytest

from beameval.core.errors import MetricError, TemplateError


def test_normalised_equality(build, row) -> None:
    metric = build("exact-match", reference="{{ item.answer }}")
    assert metric.output_names() == ["exact-match"]
    assert metric.score(row({"answer": "The Cat!"}, output_text="cat")) == {"exact-match": 1.0}
    assert metric.score(row({"answer": "the end-game"}, output_text="endgame")) == {"exact-match": 1.0}
    assert metric.score(row({"answer": "dog"}, output_text="cat")) == {"exact-match": 0.0}
    assert metric.score(row({"answer": "L'été"}, output_text="lété")) == {"exact-match": 1.0}


def test_numbers_render_as_text(build, row) -> None:
    metric = build("exact-match", reference="{{ item.answer }}")
    assert metric.score(row({"answer": 42}, output_text="42")) == {"exact-match": 1.0}
    assert metric.score(row({"answer": -1.5}, output_text="-1.5")) == {"exact-match": 1.0}
    # "3.14" normalises to "314", like the reference
    assert metric.score(row({"answer": 3.14}, output_text="314")) == {"exact-match": 1.0}


def test_explicit_candidate_template(build, row) -> None:
    metric = build("exact-match", reference="{{ item.answer }}", candidate="{{ item.prediction }}")
    assert metric.score(row({"answer": "Yes", "prediction": "yes."})) == {"exact-match": 1.0}
    # an explicit candidate may be empty: both sides normalise to ""
    assert metric.score(row({"answer": "the", "prediction": ""})) == {"exact-match": 1.0}


@pytest.mark.parametrize(
    ("sample", "cause"),
    [
        ({}, "offline runs (no target) must set 'candidate'"),
        ({"output_text": ""}, "the model returned an empty answer"),
        ({"output_text": None}, "the model returned an empty answer"),
        ({"response": {}}, "the sample has no output_text"),
    ],
)
def test_missing_candidate(build, row, sample, cause) -> None:
    metric = build("exact-match", reference="x")
    with pytest.raises(MetricError, match="metric 'exact-match' has no candidate to score") as err:
        metric.score(row({"answer": "x"}, **sample))
    assert cause in str(err.value)


def test_missing_candidate_is_checked_before_the_reference(build, row) -> None:
    metric = build("exact-match", reference="{{ item.missing }}")
    with pytest.raises(MetricError):
        metric.score(row({}, output_text=""))


def test_non_text_reference_is_a_template_error(build, row) -> None:
    metric = build("exact-match", reference="{{ item.answer }}")
    with pytest.raises(TemplateError, match="the reference must be text.*rendered a list"):
        metric.score(row({"answer": ["a"]}, output_text="a"))
    with pytest.raises(TemplateError, match="rendered a bool"):
        metric.score(row({"answer": True}, output_text="True"))


def test_missing_field_is_a_template_error(build, row) -> None:
    metric = build("exact-match", reference="{{ item.answer }}")
    with pytest.raises(TemplateError, match="'answer'"):
        metric.score(row({"question": "q"}, output_text="a"))


def test_config_rejects_unknown_keys(build) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="extra"):
        build("exact-match", reference="x", references=["y"])
    with pytest.raises(ValidationError, match="reference"):
        build("exact-match")
