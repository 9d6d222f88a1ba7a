"""The closest known name to a misspelt one: the "did you mean" of flags, config keys and template fields.

One place, so every message suggests by the same rule (difflib's ratio, the best match only).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest"]


def closest(word: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known name most similar to ``word``, or None when none is at least ``cutoff`` similar (0..1)."""
    found = difflib.get_close_matches(word, sorted(known), n=1, cutoff=cutoff)
    return found[0] if found else None
