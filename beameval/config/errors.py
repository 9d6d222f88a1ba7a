"""Pydantic validation errors as one readable line per problem, naming the key path."""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from beameval.core.suggest import closest

__all__ = ["format_errors"]


def format_errors(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """Every problem in ``exc`` as ``key path: what is wrong``, joined into one sentence.

    With the ``model`` that was validated, an unknown key names the closest key its section
    does have (``params.paralelism``: did you mean ``params.parallelism``?).
    """
    messages = []
    for error in exc.errors():
        location = _dotted(prefix, error["loc"])
        if error["type"] == "extra_forbidden":
            meant = closest(str(error["loc"][-1]), _keys_at(model, error["loc"][:-1])) if model else None
            hint = f"did you mean '{_dotted(prefix, (*error['loc'][:-1], meant))}'?" if meant else "check its spelling;"
            messages.append(f"unknown key '{location}' ({hint} unknown keys are refused)")
        elif error["type"] == "missing":
            messages.append(f"missing required key '{location}'")
        else:
            text = error["msg"].removeprefix("Value error, ")
            given = "" if error["type"] == "value_error" else _given(error)
            messages.append(f"'{location}': {text}{given}")
    return "; ".join(messages) + "."


def _dotted(prefix: str, loc: tuple[Any, ...]) -> str:
    location = ".".join(str(part) for part in (prefix, *loc) if part != "")
    return re.sub(r"\.(function-after|function-before)\[[^\]]*\]", "", location)


def _keys_at(model: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """The keys the section at ``path`` (a pydantic error location) accepts, by walking the models' annotations.

    Parts that are not keys (list positions, validator tags) step into the item types or are
    skipped, so an unresolvable path gives no keys and so no suggestion, never a wrong one.
    """
    candidates: list[Any] = [model]
    for part in path:
        models = [cls for cls in _flatten(candidates) if isinstance(cls, type) and issubclass(cls, BaseModel)]
        fields = [cls.model_fields[part] for cls in models if isinstance(part, str) and part in cls.model_fields]
        if fields:
            candidates = [field.annotation for field in fields]
        elif isinstance(part, int):
            candidates = [_item_type(annotation) for annotation in _flatten(candidates)]
    models = [cls for cls in _flatten(candidates) if isinstance(cls, type) and issubclass(cls, BaseModel)]
    return sorted({name for cls in models for name in cls.model_fields})


def _flatten(annotations: list[Any]) -> list[Any]:
    """Annotations with ``Annotated[...]`` and unions (``X | None``) opened up."""
    flat = []
    for annotation in annotations:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            flat.extend(_flatten([typing.get_args(annotation)[0]]))
        elif origin is typing.Union or origin is types.UnionType:
            flat.extend(_flatten(list(typing.get_args(annotation))))
        else:
            flat.append(annotation)
    return flat


def _item_type(annotation: Any) -> Any:
    """A list's item type (a dict's value type); anything else as it is."""
    args = typing.get_args(annotation)
    return args[-1] if typing.get_origin(annotation) in (list, dict) and args else annotation


def _given(error: Any) -> str:
    value = error.get("input")
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return f" (got {value!r})"
    return ""
