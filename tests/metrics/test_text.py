"""normalize_text: the reference's documented examples and edge cases."""

from __future__ import annotations

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
