"""SQuAD-style answer normalisation shared by exact-match and F1."""

from __future__ import annotations

import re
import string

__all__ = ["normalize_text"]

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_text(text: str) -> str:
    """Lower-case, delete ASCII punctuation, drop the words a/an/the, collapse whitespace.

    Punctuation is deleted, not replaced by a space ("end-game" -> "endgame"), to give
    the same scores as the reference SDK.
    """
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())
