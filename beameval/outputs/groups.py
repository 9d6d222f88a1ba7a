"""Bounded group outputs: the largest groups in results.json, every group in ``groups.parquet``.

``statistics.group_by`` on a field with many values (a user id, a document id) made
results.json grow with every value: 100,000 values gave a 130 MB file and 1.9 GB of peak
memory to write it, and every reader (the report, the history, a notebook) paid again. So
results.json keeps the ``RESULTS_GROUP_CAP`` largest groups and a summary of the rest, and
``OUT_DIR/groups.parquet`` holds one row per group, every one of them, with the same numbers.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["GROUPS_FILE", "RESULTS_GROUP_CAP", "bound_groups", "groups_parquet", "largest_groups"]

#: The file of every group, beside results.json.
GROUPS_FILE = "groups.parquet"
#: Groups results.json lists; with about a dozen scores each, 1,000 stay well under 20 MB.
RESULTS_GROUP_CAP = 1000
#: The per-score statistics a groups.parquet row carries, as ``<score>.<statistic>`` columns.
_STATISTICS = ("count", "nan_count", "mean", "std", "stderr", "ci_low", "ci_high", "min", "max")


def largest_groups(entries: Sequence[Mapping[str, Any]], cap: int) -> tuple[list[Mapping[str, Any]], dict[str, int]]:
    """The ``cap`` largest groups (by rows, then value) and a summary of the rest: groups, rows, errors."""

    def size(group: Mapping[str, Any]) -> int:
        rows = (group.get("counts") or {}).get("rows")
        return rows if isinstance(rows, int) else 0

    ranked = sorted(entries, key=lambda g: (-size(g), str(g.get("value"))))
    rest = ranked[cap:]
    summary = {
        "groups": len(rest),
        "rows": sum(size(g) for g in rest),
        "errors": sum(int((g.get("counts") or {}).get("errors") or 0) for g in rest),
        "largest": size(rest[0]) if rest else 0,
    }
    return ranked[:cap], summary


def bound_groups(results: dict[str, Any], cap: int = RESULTS_GROUP_CAP) -> list[dict[str, Any]] | None:
    """Keep results.json's ``cap`` largest groups (in their order) and summarise the rest; return every group.

    Returns:
        Every group, for ``groups.parquet``, when there were more than ``cap``; else None
        (results.json already holds them all and ``groups`` is left as it was).
    """
    groups = results.get("groups")
    if not groups or len(groups) <= cap:
        return None
    kept, rest = largest_groups(groups, cap)
    chosen = {id(group) for group in kept}
    results["groups"] = [group for group in groups if id(group) in chosen]  # the summary's order: by field, value
    results["groups_summary"] = {
        "total": len(groups),
        "listed": len(kept),
        "rest": rest,
        "file": GROUPS_FILE,
        "note": f"the {len(kept):,} largest of {len(groups):,} groups are listed here; {GROUPS_FILE} has every group",
    }
    return groups


def groups_parquet(groups: Sequence[Mapping[str, Any]]) -> bytes:
    """One Parquet row per group: ``by``, ``value`` (as JSON), its counts and ``<score>.<statistic>`` columns."""
    names = list(dict.fromkeys(s["name"] for g in groups for s in g.get("scores") or []))
    columns: dict[str, list[Any]] = {"by": [], "value": [], "rows": [], "ok": [], "errors": []}
    for name in names:
        for statistic in _STATISTICS:
            columns[f"{name}.{statistic}"] = []
    for group in groups:
        counts = group.get("counts") or {}
        columns["by"].append(str(group.get("by")))
        columns["value"].append(json.dumps(group.get("value"), ensure_ascii=False))
        for count in ("rows", "ok", "errors"):
            columns[count].append(counts.get(count))
        scores = {s["name"]: s for s in group.get("scores") or []}
        for name in names:
            for statistic in _STATISTICS:
                value = (scores.get(name) or {}).get(statistic)
                columns[f"{name}.{statistic}"].append(None if value is None else float(value))
    types = {"by": pa.string(), "value": pa.string(), "rows": pa.int64(), "ok": pa.int64(), "errors": pa.int64()}
    table = pa.table({key: pa.array(values, type=types.get(key, pa.float64())) for key, values in columns.items()})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()
