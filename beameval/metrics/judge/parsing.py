"""Turning a judge's reply text into scores: JSON (fenced or in prose too) or regex, never raising.

Every parse gives, per score, a float (NaN when nothing usable was found), the chosen
rubric label (``""`` when none) and, for a NaN, a short reason. Reasons name the score
and the kind of problem but never quote the reply, so there are few distinct ones.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from beameval.metrics.judge.scores import JsonParser, RangeScore, RubricScore, json_key

__all__ = ["ParsedScore", "find_json_object", "parse_reply", "parse_score"]

NAN = math.nan
_MAX_OBJECT_STARTS = 256  # braces tried before giving up on a long reply with no JSON object


@dataclass(frozen=True, slots=True)
class ParsedScore:
    """One score read from a reply."""

    value: float
    label: str = ""
    reason: str | None = None


def find_json_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """Find the JSON object in a judge's reply.

    The whole reply is tried first; otherwise the first ``{...}`` that decodes to an object,
    which covers replies in a Markdown code fence and replies with prose around the JSON.

    Returns:
        ``(object, None)``, or ``(None, reason)`` when there is none.

    """
    stripped = text.strip()
    if not stripped:
        return None, "the reply is empty"
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        pass
    else:
        if isinstance(whole, dict):
            return whole, None
        return None, f"the reply is a JSON {_json_kind(whole)}, not an object"
    decoder = json.JSONDecoder()
    start = text.find("{")
    tries = 0
    while start != -1 and tries < _MAX_OBJECT_STARTS:
        tries += 1
        try:
            value, _end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(value, dict):
                return value, None
        start = text.find("{", start + 1)
    return None, "no JSON object found in the reply"


def parse_reply(text: str, scores: Sequence[RangeScore | RubricScore]) -> list[ParsedScore]:
    """Parse every score from one reply (the JSON object is looked for once)."""
    found: tuple[dict[str, Any] | None, str | None] | None = None
    parsed = []
    for score in scores:
        if isinstance(score.parser, JsonParser):
            if found is None:
                found = find_json_object(text)
            parsed.append(_from_json(score, *found))
        else:
            parsed.append(parse_score(text, score))
    return parsed


def parse_score(text: str, score: RangeScore | RubricScore) -> ParsedScore:
    """Parse one score from a reply with its own parser."""
    if isinstance(score.parser, JsonParser):
        return _from_json(score, *find_json_object(text))
    if not text:
        return ParsedScore(NAN, reason="the reply is empty")
    pattern = re.compile(score.parser.pattern)
    match = pattern.match(text) if score.parser.method == "match" else pattern.search(text)
    if match is None:
        return ParsedScore(NAN, reason=f"the pattern ({score.parser.method}) does not match the reply")
    group = match.group(1)
    if group is None:
        return ParsedScore(NAN, reason="the pattern's group 1 did not capture anything")
    if isinstance(score, RubricScore):
        return _rubric_label(score, group.strip())
    try:
        value = float(group.strip())
    except ValueError:
        return ParsedScore(NAN, reason="the pattern's group 1 is not a number")
    return _in_range(score, value)


def _from_json(score: RangeScore | RubricScore, data: dict[str, Any] | None, missing_reason: str | None) -> ParsedScore:
    if data is None:
        return ParsedScore(NAN, reason=missing_reason)
    key = json_key(score)
    value = data.get(key) if key is not None else None
    if value is None:
        return ParsedScore(NAN, reason=f"the reply's JSON has no value for {key!r}")
    if isinstance(score, RubricScore):
        if not isinstance(value, str):
            return ParsedScore(NAN, reason=f"the value for {key!r} is a {_json_kind(value)}, not a rubric label")
        return _rubric_label(score, value)
    if isinstance(value, bool):
        return _in_range(score, 1.0 if value else 0.0)
    if isinstance(value, (int, float)):
        return _in_range(score, float(value))
    return ParsedScore(NAN, reason=f"the value for {key!r} is a {_json_kind(value)}, not a number")


def _rubric_label(score: RubricScore, label: str) -> ParsedScore:
    value = score.values.get(label)
    if value is None:
        return ParsedScore(NAN, reason="the label is not one of the rubric's labels")
    return ParsedScore(value, label)


def _in_range(score: RangeScore, value: float) -> ParsedScore:
    if not math.isfinite(value):
        return ParsedScore(NAN, reason="the value is not a finite number")
    if not score.minimum <= value <= score.maximum:
        return ParsedScore(NAN, reason=f"the value is outside [{score.minimum}, {score.maximum}]")
    return ParsedScore(value)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"
