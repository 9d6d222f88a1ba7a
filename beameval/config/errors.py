"""Pydantic validation errors as one readable line per problem, naming the key path."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

__all__ = ["format_errors"]


def format_errors(exc: ValidationError, prefix: str = "") -> str:
    """Every problem in ``exc`` as ``key path: what is wrong``, joined into one sentence."""
    messages = []
    for error in exc.errors():
        location = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        location = re.sub(r"\.(function-after|function-before)\[[^\]]*\]", "", location)
        if error["type"] == "extra_forbidden":
            messages.append(f"unknown key '{location}' (check its spelling; unknown keys are refused)")
        elif error["type"] == "missing":
            messages.append(f"missing required key '{location}'")
        else:
            text = error["msg"].removeprefix("Value error, ")
            given = "" if error["type"] == "value_error" else _given(error)
            messages.append(f"'{location}': {text}{given}")
    return "; ".join(messages) + "."


def _given(error: Any) -> str:
    value = error.get("input")
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return f" (got {value!r})"
    return ""
