"""Making values safe to write: valid UTF-8 text, 64-bit integers, bounded nesting and cell sizes.

One bad value (a lone surrogate from a reply cut mid-emoji, ``prompt_tokens: 2**64``, a
row nested 10,000 levels deep) must not take a run down after every request has been
paid for: Parquet, JSON Lines and Beam's pickling coder all refuse such values. Rows and
samples are cleaned where they are built, so every later stage sees writable values, and
each change is noted on the row instead of silently made.

Limits (documented in docs/FAILURES.md):

- ``MAX_NESTING``: a row nested deeper than this is a failed ``input`` row.
- ``MAX_CELL_CHARS``: a text value longer than this is a failed ``input`` row, in every
  dataset format (CSV's own field limit is raised to match).
"""

from __future__ import annotations

import marshal
import re
from typing import Any

__all__ = [
    "INT64_MAX",
    "MAX_CELL_CHARS",
    "MAX_NESTING",
    "RowTooLarge",
    "check_row",
    "clean_count",
    "clean_text",
    "clean_value",
    "writable_reply",
]

MAX_NESTING = 100
MAX_CELL_CHARS = 64 * 1024 * 1024
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

_SURROGATE = re.compile("[\ud800-\udfff]")
#: A surrogate code point in UTF-8 (``surrogatepass``): no other character encodes to these two bytes.
_SURROGATE_UTF8 = re.compile(b"\xed[\xa0-\xbf]")
#: ``marshal`` format 2: no back-references, every text as UTF-8 (``surrogatepass``), ``{``/``[`` per container.
_MARSHAL_VERSION = 2
SURROGATE_NOTE = "invalid UTF-16 surrogates (half of an emoji?) were replaced with U+FFFD"


class RowTooLarge(ValueError):
    """A value is nested too deeply or holds too long a text; the message is a predicate ("is nested ...").

    Callers put what the value is in front: ``f"{path} line 3 {exc}"``.
    """


def clean_text(text: str) -> tuple[str, bool]:
    """``text`` with every lone surrogate replaced by U+FFFD, and whether anything changed.

    Python strings decoded from JSON can hold lone surrogates (a JSON "ud83d" escape on its own), which no
    UTF-8 writer accepts. Valid pairs were already joined by the JSON decoder, so any
    surrogate left is lone.
    """
    if text.isascii() or not _SURROGATE.search(text):
        return text, False
    return _SURROGATE.sub("\ufffd", text), True


def clean_value(value: Any) -> tuple[Any, bool]:
    """A JSON-like value (a reply, a sample) with its text cleaned, and whether anything changed.

    Unchanged values are returned as they are (no copy).

    Raises:
        RowTooLarge: the value is nested deeper than ``MAX_NESTING`` (Beam could not pickle it).
    """
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, (dict, list)):
        return value, False
    if _plainly_clean(value) or not _scan(value, cell_limit=None):
        return value, False
    return _rebuild(value), True


def _plainly_clean(value: dict[str, Any] | list[Any]) -> bool:
    r"""True when ``value`` surely holds no surrogate and no container deeper than ``MAX_NESTING``; False: scan it.

    One C pass (``marshal``) instead of a Python visit of every container, about a third
    of the cost for a chat reply: every text in the encoding is UTF-8, where a surrogate
    is the only character that gives ``\xed[\xa0-\xbf]``, and every dict and list
    writes one ``{`` or ``[`` byte, so at most ``MAX_NESTING`` of those bytes means at most
    that many containers, nested or not. Other bytes that happen to match (a number's
    binary form, a brace in a text) only send the value to the exact scan, and so does
    anything marshal refuses (another type, a subclass, a cycle or a very deep value).
    """
    try:
        encoded = marshal.dumps(value, _MARSHAL_VERSION)
    except ValueError:
        return False
    containers = encoded.count(b"{") + encoded.count(b"[")
    return containers <= MAX_NESTING and _SURROGATE_UTF8.search(encoded) is None


def check_row(item: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Check a dataset row's size and clean its text; return the row to use and notes on what changed.

    Raises:
        RowTooLarge: the row is nested deeper than ``MAX_NESTING`` or holds a text value
            longer than ``MAX_CELL_CHARS``.
    """
    if not _scan(item, cell_limit=MAX_CELL_CHARS):
        return item, []
    return _rebuild(item), [f"the row's {SURROGATE_NOTE}"]


def clean_count(value: Any, what: str) -> tuple[int | None, str | None]:
    """A token count from a reply as a 64-bit integer, or None with a note saying why.

    Args:
        value: the value the endpoint reported (any JSON value).
        what: its name for the note, e.g. ``usage.prompt_tokens``.

    Returns:
        ``(count, None)`` for an integer in the signed 64-bit range; ``(None, note)``
        for anything else (a huge or negative number, a string); ``(None, None)`` when
        it was not reported.
    """
    if type(value) is int and 0 <= value <= INT64_MAX:  # nearly every count: one test
        return value, None
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int):
        return None, f"{what} was {_short(value)}, not an integer; stored as null"
    if not 0 <= value <= INT64_MAX:
        return None, f"{what} was {_short(value)}, outside the 64-bit range; stored as null"
    return value, None


def writable_reply(
    sample: dict[str, Any], prompt_tokens: Any, completion_tokens: Any, known_clean: bool = False
) -> tuple[dict[str, Any], int | None, int | None, list[str]]:
    """A parsed reply made writable: valid text, 64-bit token counts, and notes on what changed.

    Args:
        sample: the handler's parsed reply (``output_text``, ``response``, ...).
        prompt_tokens: ``usage.prompt_tokens`` as the endpoint reported it.
        completion_tokens: ``usage.completion_tokens`` as reported.
        known_clean: the caller knows the sample holds no lone surrogate and nests at most
            ``MAX_NESTING`` deep (a stored reply, by how it was read): ``clean_value`` is skipped.

    Returns:
        ``(sample, prompt_tokens, completion_tokens, notes)``.

    Raises:
        RowTooLarge: the reply is nested deeper than ``MAX_NESTING``.
    """
    cleaned, changed = (sample, False) if known_clean else clean_value(sample)
    notes = [f"the reply's {SURROGATE_NOTE}"] if changed else []
    prompt, prompt_note = clean_count(prompt_tokens, "usage.prompt_tokens")
    completion, completion_note = clean_count(completion_tokens, "usage.completion_tokens")
    if prompt_note or completion_note:
        notes += [note for note in (prompt_note, completion_note) if note]
    return cleaned, prompt, completion, notes


def _short(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() >= 200:
        return f"a {len(str(value))}-digit number"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def _scan(value: Any, cell_limit: int | None) -> bool:
    """Whether ``value`` holds text to clean; iterative, so a deep value cannot overflow the stack.

    Raises:
        RowTooLarge: deeper than ``MAX_NESTING``, or a string longer than ``cell_limit``.
    """
    if cell_limit is None:
        return _scan_unlimited(value)
    bad_text = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, str):
            if cell_limit is not None and len(current) > cell_limit:
                raise RowTooLarge(
                    f"holds a text value of {len(current):,} characters, over the limit of {cell_limit:,} "
                    "(the same for every dataset format)"
                )
            bad_text = bad_text or _bad(current)
        elif isinstance(current, (dict, list)):
            if depth > MAX_NESTING:
                raise RowTooLarge(f"is nested more than {MAX_NESTING} levels deep (the limit); flatten it")
            if isinstance(current, dict):
                for key, child in current.items():
                    if isinstance(key, str) and _bad(key):
                        bad_text = True
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in current)
    return bad_text


def _scan_unlimited(value: Any) -> bool:
    """``_scan`` without a cell limit (a reply, checked once per row, fresh or stored), in about half the time.

    Only nesting can raise, so the order of the visit does not matter: the text of a
    container's children is checked as it is listed, and only containers go on the stack.
    """
    if isinstance(value, str):
        return _bad(value)
    bad_text = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if not isinstance(current, (dict, list)):
            continue
        if depth > MAX_NESTING:
            raise RowTooLarge(f"is nested more than {MAX_NESTING} levels deep (the limit); flatten it")
        if isinstance(current, dict):
            if not bad_text:
                bad_text = any(isinstance(key, str) and _bad(key) for key in current)
            children: Any = current.values()
        else:
            children = current
        for child in children:
            if isinstance(child, str):
                if not bad_text and not child.isascii() and _SURROGATE.search(child) is not None:
                    bad_text = True
            elif isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return bad_text


def _rebuild(value: Any) -> Any:
    """A copy of ``value`` with every string cleaned (recursive: only called on rows within MAX_NESTING)."""
    if isinstance(value, str):
        return clean_text(value)[0]
    if isinstance(value, dict):
        return {(clean_text(k)[0] if isinstance(k, str) else k): _rebuild(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebuild(v) for v in value]
    return value
