"""The prompt x model matrix of a multi-target run: one line per row, one column per target.

Each cell is that target's answer with its scores, so a reader sees where the models
differ on the same prompt, filters by text or by one target's score, sorts by a score, and
opens a line to read the answers whole. The rows are a bounded sample (``pipeline.report``
picks them from the first target's rows, failed ones first, then the others' rows with the
same keys), so the page stays small at any run size; the page says how many it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from beameval.report.html import attr, data_json, esc, num
from beameval.report.rows import TEXT_BUDGET, RowColumns, as_text, cut_text

__all__ = ["MatrixRow", "matrix_section"]


@dataclass
class MatrixRow:
    """One dataset row (and sample) across targets: its item and each target's ``rows/`` record."""

    row_index: int
    sample_index: int
    item: Any
    answers: dict[str, Mapping[str, Any]] = field(default_factory=dict)


def matrix_section(
    targets: Sequence[str],
    rows: Sequence[MatrixRow],
    score_names: Sequence[str],
    columns: RowColumns,
    references: Sequence[str],
    total_rows: int,
) -> str:
    """The section: a filter bar (search, score range, sort) and the matrix table, paged by the page's script."""
    limit = max(80, min(1000, TEXT_BUDGET // max(1, 4 * len(rows) * max(1, len(targets)))))
    keys = [(target, name) for target in targets for name in score_names]
    shown = columns.present([{"item": row.item} for row in rows[:50]], references)
    options = "".join(f'<option value="{i}">{esc(t)}: {esc(n)}</option>' for i, (t, n) in enumerate(keys))
    bar = (
        '<div class="filters" data-target="matrix-table">'
        '<input type="search" data-filter="q" id="matrix-search" placeholder="search prompts and answers">'
        '<select data-filter="status"><option value="">any status</option><option value="ok">ok everywhere</option>'
        '<option value="error">failed somewhere</option></select>'
        f'<select data-filter="sort"><option value="">sort by row</option>{options}</select>'
        f'<select data-filter="score"><option value="">score range…</option>{options}</select>'
        '<input type="number" step="any" data-filter="min" placeholder="min">'
        '<input type="number" step="any" data-filter="max" placeholder="max">'
        '<span class="shown"></span></div>'
    )
    head = "".join(f"<th>{esc(target)}</th>" for target in targets)
    body = [f'<table class="browse matrix" id="matrix-table"><thead><tr><th>row</th>{shown.head()}{head}</tr></thead>']
    for row in rows:
        body.append(_line(row, targets, score_names, keys, shown, references, limit))
    body.append("</table>")
    note = (
        f'<p class="note sample">The matrix holds {len(rows):,} of the run\'s {total_rows:,} rows (failed rows first, '
        "then a seeded sample); every statistic covers all rows, and each target's rows/ holds every row.</p>"
        if len(rows) < total_rows
        else ""
    )
    return (
        '<section id="matrix"><h2>Prompts × models</h2>'
        f'<p class="sub">each cell: the target\'s answer and its scores; click a line to read the answers whole</p>'
        f'{note}{bar}<div class="scroll">{"".join(body)}</div>'
        '<button class="more" data-for="matrix-table" hidden>show more</button></section>'
    )


def _line(
    row: MatrixRow,
    targets: Sequence[str],
    score_names: Sequence[str],
    keys: Sequence[tuple[str, str]],
    shown: RowColumns,
    references: Sequence[str],
    limit: int,
) -> str:
    values = [_score(row.answers.get(target), name) for target, name in keys]
    failed = any(str((row.answers.get(t) or {}).get("status")) != "ok" for t in targets)
    index = f"{row.row_index}" + (f".{row.sample_index}" if row.sample_index else "")
    cells, details = [], []
    for target in targets:
        answer = row.answers.get(target)
        if answer is None:
            cells.append('<td class="answer">–</td>')
            details.append(f'<div><div class="label">{esc(target)}</div><pre>(not in this sample)</pre></div>')
            continue
        text = as_text(answer.get("output_text") if answer.get("status") == "ok" else answer.get("error"))
        line = " · ".join(f"{esc(name)} {num(_score(answer, name))}" for name in score_names if name in answer)
        status = str(answer.get("status") or "")
        cells.append(
            f'<td class="answer status-{attr(status)}"><div class="txt">{esc(cut_text(text, 200))}</div>'
            f'<div class="scores-line">{line}</div></td>'
        )
        details.append(
            f'<div><div class="label">{esc(target)} ({esc(status)})</div><pre>{esc(cut_text(text, limit))}</pre></div>'
        )
    summary = (
        f'<tr class="sum"><td class="num">{esc(index)}</td>{shown.cells({}, row.item, references)}{"".join(cells)}</tr>'
    )
    width = 1 + shown.width + len(targets)
    return (
        f'<tbody class="r" data-status="{"error" if failed else "ok"}" data-s="{data_json(values)}">{summary}'
        f'<tr class="det" hidden><td colspan="{width}"><div class="side">{"".join(details)}</div></td></tr></tbody>'
    )


def _score(answer: Mapping[str, Any] | None, name: str) -> float | None:
    value = None if answer is None else answer.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
