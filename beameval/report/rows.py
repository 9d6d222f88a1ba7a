"""The rows browser: sampled ``rows/`` records as a filterable table, each row opening to its details.

Every value is escaped here, in Python; the page's script only hides and shows what is
already there (see ``assets.py``). Long texts are cut so the page stays small however
large the outputs are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from beameval.report.html import attr, data_json, esc, num

__all__ = [
    "STANDARD_COLUMNS",
    "TEXT_BUDGET",
    "as_text",
    "cut_text",
    "group_token",
    "item_of",
    "lookup",
    "reference_fields",
    "rows_browser",
]

#: ``rows/`` columns shown in their own place; any other column (labels, judge replies) is listed too.
STANDARD_COLUMNS = frozenset(
    {
        "row_index", "sample_index", "status", "item", "output_text", "error", "latency_ms", "attempts",
        "http_status", "prompt_tokens", "completion_tokens", "request_hash", "cached", "prompt",
        "failure", "phase", "metric",
    }
)  # fmt: skip
_REFERENCE_KEYS = ("reference", "answer", "expected", "expected_output", "target", "ground_truth", "gold")
_ITEM_FIELD = re.compile(r"\{\{\s*item\.([A-Za-z_][\w.]*)")
#: Characters of all embedded row text, so 2,000 long rows cannot make a page of tens of MB.
TEXT_BUDGET = 3_000_000


def item_of(row: Mapping[str, Any]) -> Any:
    """The row's ``item`` decoded from JSON (the raw text when it is not JSON, e.g. an input failure)."""
    raw = row.get("item")
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def lookup(item: Any, path: str) -> tuple[bool, Any]:
    """``(found, value)`` of a dotted path (``meta.source``) in an item."""
    current = item
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current


def group_token(by: str, value: Any) -> str:
    """How a group is named in filters: ``field=value`` (``null`` for a missing field)."""
    shown = "null" if value is None else json.dumps(value) if isinstance(value, bool) else str(value)
    return f"{by}={shown}"


def reference_fields(
    config: Mapping[str, Any] | None, keys: Sequence[str] = ("reference", "references", "right_template")
) -> list[str]:
    """Item fields the metrics read through ``keys`` templates (``{{ item.answer }}``), when the config shows them.

    With ``keys=("candidate",)`` these are where an offline run's outputs live.
    """
    found: list[str] = []
    for metric in (config or {}).get("metrics") or []:
        if not isinstance(metric, Mapping):
            continue
        for key in keys:
            for match in _ITEM_FIELD.finditer(json.dumps(metric.get(key) or "")):
                if match.group(1) not in found:
                    found.append(match.group(1))
    return found


def cut_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def as_text(value: Any) -> str:
    """A value as display text: strings as they are, anything else as indented JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=1, ensure_ascii=False, default=str)


def _block(label: str, value: Any, limit: int) -> str:
    text = as_text(value)
    if not text:
        return ""
    return f'<div class="label">{esc(label)}</div><pre>{esc(cut_text(text, limit))}</pre>'


def rows_browser(
    rows: Sequence[Mapping[str, Any]],
    score_names: Sequence[str],
    group_fields: Sequence[str] = (),
    references: Sequence[str] = (),
    table_id: str = "rows-table",
    outputs: Sequence[str] = (),
) -> str:
    """The table of rows, one ``<tbody>`` per row: a summary line and a hidden detail line.

    Args:
        rows: ``rows/`` records, with ``failure`` (a failure group id), ``phase`` and ``metric`` when known.
        score_names: the per-row score columns, in results.json order.
        group_fields: ``statistics.group_by`` fields; each row is tagged with its groups.
        references: item fields to show as the reference (``reference_fields``); else common names.
        table_id: the element id the filter bar points at.
        outputs: item fields holding the output when ``output_text`` is empty (offline runs).

    Returns:
        The table's HTML.
    """
    limit = max(200, min(2000, TEXT_BUDGET // max(1, 3 * len(rows))))
    scores = [name for name in score_names if any(name in row for row in rows[:50])] or list(score_names)
    head = "".join(f"<th>{esc(name)}</th>" for name in scores)
    parts = [
        f'<table class="browse" id="{attr(table_id)}"><thead><tr><th>row</th><th>status</th>{head}'
        "<th>output</th><th>error</th></tr></thead>"
    ]
    for row in rows:
        parts.append(_row(row, scores, group_fields, references, outputs, limit))
    parts.append("</table>")
    return "".join(parts)


def _row(
    row: Mapping[str, Any],
    scores: Sequence[str],
    group_fields: Sequence[str],
    references: Sequence[str],
    outputs: Sequence[str],
    limit: int,
) -> str:
    item = item_of(row)
    if row.get("output_text") is None and outputs:
        # Offline: the output is a field of the row, read by the metrics' candidate template.
        found = [value for path in outputs for ok, value in [lookup(item, path)] if ok]
        row = {**row, "output_text": found[0] if found else None}
    status = str(row.get("status") or "")
    groups = [group_token(by, lookup(item, by)[1]) for by in group_fields]
    values = [row.get(name) for name in scores]
    index = f"{row.get('row_index')}" + (f".{row['sample_index']}" if row.get("sample_index") else "")
    cells = "".join(f'<td class="num">{num(v)}</td>' for v in values)
    failure = row.get("failure")
    summary = (
        f'<tr class="sum"><td class="num">{esc(index)}</td><td class="status-{attr(status)}">{esc(status)}</td>'
        f'{cells}<td class="txt">{esc(cut_text(as_text(row.get("output_text")), 140))}</td>'
        f'<td class="txt">{esc(cut_text(as_text(row.get("error")), 140))}</td></tr>'
    )
    colspan = 4 + len(scores)
    return (
        f'<tbody class="r" data-status="{attr(status)}" data-f="{"" if failure is None else attr(failure)}" '
        f'data-g="{data_json(groups)}" data-s="{data_json(values)}">{summary}'
        f'<tr class="det" hidden><td colspan="{colspan}">{_details(row, item, references, limit)}</td></tr></tbody>'
    )


def _details(row: Mapping[str, Any], item: Any, references: Sequence[str], limit: int) -> str:
    parts = []
    prompt = row.get("prompt")
    parts.append(
        _block("prompt" if prompt is not None else "row (item)", prompt if prompt is not None else item, limit)
    )
    parts.append(_block("output", row.get("output_text"), limit))
    parts.append(_block("reference", _reference(item, references), limit))
    extra = {k: v for k, v in row.items() if k not in STANDARD_COLUMNS and not isinstance(v, float | int)}
    for key, value in extra.items():
        if value not in (None, ""):
            label = "judge reply" if "judge" in key or "reply" in key else key
            parts.append(_block(label, value, limit))
    numbers = {k: v for k, v in row.items() if k not in STANDARD_COLUMNS and isinstance(v, float | int)}
    facts = [f"{esc(k)}: <b>{num(v)}</b>" for k, v in numbers.items()]
    for key in ("latency_ms", "attempts", "http_status", "prompt_tokens", "completion_tokens", "cached"):
        if row.get(key) is not None:
            facts.append(f"{esc(key)}: <b>{num(row[key])}</b>")
    if facts:
        parts.append('<div class="label">scores and facts</div><p>' + " · ".join(facts) + "</p>")
    if row.get("error"):
        where = ", ".join(str(row[k]) for k in ("phase", "metric") if row.get(k))
        parts.append(_block(f"error ({where})" if where else "error", row["error"], limit))
    return "".join(parts)


def _reference(item: Any, references: Iterable[str]) -> Any:
    if not isinstance(item, Mapping):
        return None
    fields = list(references) or [k for k in _REFERENCE_KEYS if k in item]
    found = {path: value for path in fields for ok, value in [lookup(item, path)] if ok}
    if len(found) == 1:
        return next(iter(found.values()))
    return found or None
