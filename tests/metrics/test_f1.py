"""f1: SQuAD token F1 on normalised tokens."""

from __future__ import annotations

import pytest

from beameval.core.errors import MetricError
from beameval.metrics.f1 import token_f1


@pytest.mark.parametrize(
    ("candidate", "reference", "expected"),
    [
        ("", "", 1.0),  # both empty
        ("a the an", "!!!", 1.0),  # both empty after normalisation
        ("", "cat", 0.0),  # one empty
        ("cat", "", 0.0),
        ("the", "cat", 0.0),
        ("dog", "cat", 0.0),  # no common token
        ("The Cat!", "cat", 1.0),
        ("cat sat", "cat", 2 * 0.5 * 1.0 / 1.5),  # P=1/2, R=1
        ("cat", "cat sat", 2 * 1.0 * 0.5 / 1.5),  # P=1, R=1/2
        # multiset intersection: two "cat" in the candidate match one in the reference
        ("cat cat", "cat dog", 0.5),
        ("cat cat dog", "cat cat", 2 * (2 / 3) * 1.0 / (2 / 3 + 1.0)),
        ("the end-game", "endgame", 1.0),
        ("3.14", "314", 1.0),
        ("-3.14", "3.14", 1.0),  # the sign is punctuation, deleted
        ("L'été est là", "lété", 2 * (1 / 3) * 1.0 / (1 / 3 + 1.0)),
        ("Straße Café", "café straße", 1.0),  # order does not matter
    ],
)
def test_token_f1(candidate: str, reference: str, expected: float) -> None:
    assert token_f1(candidate, reference) == expected


def test_exact_value_for_partial_overlap() -> None:
    # 2 common tokens; P = 2/3, R = 2/4, F1 = 2PR/(P+R) = 4/7
    assert token_f1("big red fox", "the big red brown dog") == 2 * (2 / 3) * (2 / 4) / (2 / 3 + 2 / 4)


def test_metric(build, row) -> None:
    metric = build("f1", reference="{{ item.answer }}")
    assert metric.output_names() == ["f1"]
    assert metric.score(row({"answer": "cat cat dog"}, output_text="cat")) == {"f1": 0.5}
    assert metric.score(row({"answer": 12}, output_text="12 apples")) == {"f1": 2 * 0.5 * 1.0 / 1.5}


def test_candidate_template(build, row) -> None:
    metric = build("f1", reference="{{ answer }}", candidate="{{ guess }}")
    assert metric.score(row({"answer": "yes", "guess": "Yes!"})) == {"f1": 1.0}


def test_missing_candidate(build, row) -> None:
    metric = build("f1", reference="x")
    with pytest.raises(MetricError, match="metric 'f1' has no candidate"):
        metric.score(row({"answer": "x"}))
