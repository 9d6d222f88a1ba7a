"""The judge's structured output: a JSON Schema derived from its scores, or a check of the user's own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beameval.metrics.judge.scores import RangeScore, RubricScore, json_key

__all__ = ["check_schema_covers_scores", "derive_schema"]

_RANGE_TYPES = frozenset({"number", "integer", "boolean"})


def _property(score: RangeScore | RubricScore) -> dict[str, Any]:
    if isinstance(score, RubricScore):
        return {"type": "string", "enum": [level.label for level in score.rubric]}
    return {
        "type": "integer" if score.is_integer else "number",
        "minimum": score.minimum,
        "maximum": score.maximum,
    }


def derive_schema(scores: Sequence[RangeScore | RubricScore]) -> dict[str, Any] | None:
    """The schema asking for one property per JSON-parsed score, all required.

    A rubric score is a string enum of its labels; a range score an ``integer`` (when its
    minimum is written as an integer) or a ``number``, with ``minimum`` and ``maximum``.

    Returns:
        The schema, or None when no score is parsed from JSON.

    Raises:
        ValueError: two scores read the same key but define it differently.

    """
    properties: dict[str, dict[str, Any]] = {}
    for score in scores:
        key = json_key(score)
        if key is None:
            continue
        prop = _property(score)
        if key in properties and properties[key] != prop:
            raise ValueError(
                f"scores read the JSON key {key!r} with different definitions ({properties[key]} and {prop}); "
                "give each score its own key (parser.json_path) or write structured_output yourself"
            )
        properties[key] = prop
    if not properties:
        return None
    return {"type": "object", "properties": properties, "required": list(properties)}


def check_schema_covers_scores(schema: Any, scores: Sequence[RangeScore | RubricScore]) -> None:
    """Check a user-given schema: an object declaring every JSON-parsed score's key with a fitting type.

    Rubric keys must be strings; range keys numbers, integers or booleans. A property
    without ``type`` is accepted as it is.

    Raises:
        ValueError: the schema is not an object schema, or a key is missing or mistyped.

    """
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if (
        not isinstance(schema, Mapping)
        or schema.get("type", "object") != "object"
        or not isinstance(properties, Mapping)
    ):
        raise ValueError("the schema must be an object schema with 'properties' (type: object)")
    for score in scores:
        key = json_key(score)
        if key is None:
            continue
        prop = properties.get(key)
        if not isinstance(prop, Mapping):
            raise ValueError(f"the schema does not declare the property {key!r} that score {score.name!r} reads")
        declared = prop.get("type")
        if declared is None:
            continue
        types = set(declared) if isinstance(declared, list) else {declared}
        if isinstance(score, RubricScore):
            if "string" not in types:
                raise ValueError(f"property {key!r} of rubric score {score.name!r} must have type string")
        elif not types & _RANGE_TYPES:
            raise ValueError(
                f"property {key!r} of range score {score.name!r} must have type number, integer or boolean"
            )
