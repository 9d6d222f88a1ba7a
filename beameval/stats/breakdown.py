"""Which scopes a row belongs to: the whole run, one group per ``group_by`` field, and its cluster.

A scope is named by a plain string, so that Beam can key on it deterministically: ``""``
is the whole run and ``"<position>:<value as canonical JSON>"`` the group of the
``position``-th ``group_by`` field with that value. A row whose field is missing (or
null, or NaN, or whose item could not be parsed) belongs to the group of value null;
the same rule gives the cluster of value null for ``cluster_by``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from json.encoder import encode_basestring as _encode_string  # type: ignore[attr-defined]
from typing import Any

__all__ = ["OVERALL", "group_order", "parse_scope", "resolve", "row_keys", "value_key"]

OVERALL = ""
"""The scope of the whole run."""

Path = tuple[str, ...]


def resolve(item: Any, path: Path) -> Any:
    """The value at a dotted path in a row; None when any step is missing.

    Args:
        item: the row (a JSON object).
        path: the path's segments; a segment indexes a list (or a Parquet map's key-value pairs) when it is a number.

    Returns:
        The value found, with NaN as None.

    """
    current = item
    for segment in path:
        if isinstance(current, dict):
            if segment not in current:
                return None
            current = current[segment]
        elif isinstance(current, (list, tuple)) and segment.isdigit() and int(segment) < len(current):
            current = current[int(segment)]
        else:
            return None
    if isinstance(current, float) and math.isnan(current):
        return None
    return current


def value_key(value: Any) -> str:
    """The canonical JSON text of a value: equal values, equal keys (dict key order ignored).

    Args:
        value: a JSON value.

    Returns:
        Compact JSON with sorted keys.

    """
    if isinstance(value, str):  # the common case, without json.dumps' overhead (same text)
        return _encode_string(value)
    if value is None or isinstance(value, (bool, int)):
        return "null" if value is None else ("true" if value is True else "false" if value is False else str(value))
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def row_keys(
    item_json: str, groups: Sequence[Path], cluster: Path | None, item: Any = None
) -> tuple[tuple[str, ...], str | None]:
    """Name the scopes and the cluster of one row.

    Args:
        item_json: the row as written to ``rows/`` (raw text for rows that failed to parse).
        groups: the ``group_by`` paths, in config order.
        cluster: the ``cluster_by`` path, or None.
        item: the row whose exact encoding ``item_json`` is, when the caller has it: the same
            keys without parsing ``item_json`` again (``value_key`` is a JSON encoding, so a value
            and its JSON round trip give one key).

    Returns:
        ``(scopes, cluster_key)``: ``OVERALL`` then one group scope per path, and the
        cluster's ``value_key`` (None without ``cluster_by``).

    """
    if not groups and cluster is None:
        return (OVERALL,), None
    if item is None:
        try:
            item = json.loads(item_json)
        except ValueError:
            item = None
    scopes = (OVERALL, *(f"{position}:{value_key(resolve(item, path))}" for position, path in enumerate(groups)))
    return scopes, None if cluster is None else value_key(resolve(item, cluster))


def parse_scope(scope: str) -> tuple[int, Any]:
    """Split a group scope into the position of its ``group_by`` field and its value.

    Args:
        scope: a scope other than ``OVERALL``.

    Returns:
        ``(position, value)``.

    """
    position, _, text = scope.partition(":")
    return int(position), json.loads(text)


def group_order(position: int, value: Any) -> tuple[Any, ...]:
    """A sort key for groups: by field, then numbers, strings, other values, and null last.

    Args:
        position: the ``group_by`` field's position.
        value: the group's value.

    Returns:
        A tuple that orders groups deterministically whatever the value types.

    """
    if value is None:
        return (position, 3, "")
    if isinstance(value, (bool, int, float)):
        return (position, 0, float(value), value_key(value))
    if isinstance(value, str):
        return (position, 1, value)
    return (position, 2, value_key(value))
