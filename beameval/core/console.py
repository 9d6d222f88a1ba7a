r"""Text for a terminal: data (a row, a model's answer quoted in a message) must not drive the terminal.

A dataset or a model may hold terminal escape sequences (``ESC [ 2 J`` clears the screen,
OSC 52 writes the clipboard, OSC 8 hides a link) and bidirectional overrides that make a
line read differently from what it holds. Everything the CLI prints that may quote data
(the summary, failure messages, warnings) goes through ``printable``, which writes such
characters as visible escapes (``\x1b``, ``\u202e``) instead. Files (rows/, errors/,
results.json) keep the text as it is: only the console is protected.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

#: C0 controls but tab and newline, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every terminal control character written as a visible escape (the same object when clean)."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
