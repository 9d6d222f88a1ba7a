"""Which row fields a config's templates read, found without rendering anything.

The preflight renders the prompt against the first rows, but a metric's templates need a
model answer that does not exist yet, so a typo such as ``{{ item.answr }}`` in a
``reference`` used to be found only after every request was paid for. Reading the
templates' syntax trees finds every ``item.FIELD`` and ``item["FIELD"]`` in every template
of the config (prompt, metrics, judge prompts, agent and remote bodies) before any request.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment

from beameval.core.suggest import closest

__all__ = ["FieldUse", "item_fields", "missing_fields"]

_PARSER = SandboxedEnvironment()


@dataclass(frozen=True)
class FieldUse:
    """One ``item.FIELD`` read: where in the config (``metrics.0.reference``) and which field."""

    where: str
    field: str


def item_fields(value: Any, where: str = "") -> Iterator[FieldUse]:
    """Every top-level row field read through ``item`` by the templates inside ``value`` (any nesting)."""
    if isinstance(value, str):
        if "{{" in value or "{%" in value:
            yield from _fields_of(value, where)
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            yield from item_fields(inner, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for position, inner in enumerate(value):
            yield from item_fields(inner, f"{where}.{position}" if where else str(position))


def _fields_of(source: str, where: str) -> Iterator[FieldUse]:
    try:
        tree = _PARSER.parse(source)
    except TemplateSyntaxError:
        return  # the template's own validation reports syntax errors, with their line
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        if isinstance(node, nodes.Getattr) and _is_item(node.node):
            yield FieldUse(where, node.attr)
        elif isinstance(node, nodes.Getitem) and _is_item(node.node):
            key = node.arg
            if isinstance(key, nodes.Const) and isinstance(key.value, str):
                yield FieldUse(where, key.value)


def _is_item(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Name) and node.name == "item"


def missing_fields(uses: Iterable[FieldUse], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One message per field that no row in ``rows`` has, naming the closest field that exists.

    A field is only missing when every row lacks it: optional fields (present in some rows)
    are the template's business, handled per row.
    """
    present = {key for row in rows for key in row}
    messages = []
    seen: set[tuple[str, str]] = set()
    for use in uses:
        if use.field in present or (use.where, use.field) in seen or _is_method(use.field):
            continue
        seen.add((use.where, use.field))
        close = closest(use.field, present)
        meant = f" (did you mean item.{close}?)" if close else ""
        messages.append(
            f"{use.where} reads item.{use.field}, which none of the first {len(rows)} row(s) has{meant}; "
            f"the rows have: {', '.join(sorted(present)) or 'no fields'}"
        )
    return messages


def _is_method(name: str) -> bool:
    """``item.get(...)``, ``item.items()``, and ``_private`` names (the sandbox's business) are not fields."""
    return name in {"get", "items", "keys", "values"} or name.startswith("_")
