"""normalize_text: the reference's documented examples and edge cases, and its fast road against the definition."""

from __future__ import annotations

import random
import re
import string

import pytest

from beameval.metrics.text import normalize_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the reference SDK's normalisation, verified examples
        ("The Cat!", "cat"),
        ("the end-game", "endgame"),
        ("3.14", "314"),
        ("a", ""),
        ("L'été", "lété"),
        # edge cases
        ("", ""),
        ("   \t\n ", ""),
        ("An apple, a pear and THE plum.", "apple pear and plum"),
        ("theory anthem", "theory anthem"),  # articles only as whole words
        ("-12.5", "125"),
        ("+3", "3"),
        ("«Bonjour» — monde…", "«bonjour» — monde…"),  # unicode punctuation is kept
        ("ÉCOLE Straße", "école straße"),
        ("a.b", "ab"),  # punctuation deleted first, so no article is left behind
        ("a. b", "b"),
        ("multiple   spaces\there", "multiple spaces here"),
    ],
)
def test_normalize_text(text: str, expected: str) -> None:
    assert normalize_text(text) == expected


def by_the_definition(text: str) -> str:
    """The normalisation as first written: regex articles over str.translate, no fast road."""
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def test_the_fast_road_gives_the_definitions_result_on_random_text() -> None:
    """ASCII words, articles in every case, control characters, str-only whitespace, non-ASCII letters."""
    rng = random.Random(5)
    alphabet = string.printable + "\x00\x01\x1c\x1d\x1e\x1f\x7f\x85\xa0éÉßİ\u212a—«»\u2028"
    words = ["a", "an", "the", "The", "A", "AN", "theme", "an_", "_the", "a1", "x", "ThE."]
    for _ in range(30_000):
        parts = [
            rng.choice(words) if rng.random() < 0.5 else "".join(rng.choices(alphabet, k=rng.randint(0, 4)))
            for _ in range(rng.randint(0, 8))
        ]
        text = rng.choice(["", " ", "\t", "-", "\x1f", "\x01", " \u212a "]).join(parts)
        assert normalize_text(text) == by_the_definition(text), repr(text)
