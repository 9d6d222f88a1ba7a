"""The run report's judge agreement panel: whether a judge can be trusted, and the mean people would give.

One panel per entry of ``results.json``'s ``judge_agreement``: the confusion matrix of the
labelled rows as a heat map (rows the person's label, columns the judge's; the diagonal
is agreement), kappa with its interval, alpha, accuracy and bias, whether the judge is
calibrated, and the prediction-powered mean of the human score beside the judge's naive
mean (the gap is the judge's bias, corrected). Empty for a run without calibration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beameval.report.html import attr, esc, facts_table, interval, num, scores_by_name

__all__ = ["confusion_heatmap", "judge_section"]


def confusion_heatmap(name: str, confusion: Mapping[str, Mapping[str, Any]], cell: int = 34) -> str:
    """The confusion matrix as an SVG grid, each cell shaded by its share of the largest count."""
    labels = list(confusion)
    counts = [[int(confusion[h].get(j) or 0) for j in labels] for h in labels]
    peak = max((c for row in counts for c in row), default=0) or 1
    left, top = 70, 34
    width, height = left + cell * len(labels) + 8, top + cell * len(labels) + 8
    parts = [
        f'<svg class="chart confusion" data-score="{attr(name)}" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(name)}: human label (rows) by judge label (columns)</title>",
        f'<text x="{left}" y="10">judge →</text><text x="2" y="{top - 4}">human ↓</text>',
    ]
    for k, label in enumerate(labels):
        x = left + k * cell + cell / 2
        y = top + k * cell + cell / 2 + 4
        parts.append(f'<text x="{x:.0f}" y="{top - 6}" text-anchor="middle">{esc(label)}</text>')
        parts.append(f'<text x="{left - 6}" y="{y:.0f}" text-anchor="end">{esc(label)}</text>')
    for h, row in enumerate(counts):
        for j, count in enumerate(row):
            x, y = left + j * cell, top + h * cell
            shade = 0.08 + 0.92 * count / peak if count else 0.0
            ink = ' style="fill:#fff"' if shade > 0.55 else ""  # the count stays readable on a dark cell
            parts.append(
                f'<g class="cell" data-human="{attr(labels[h])}" data-judge="{attr(labels[j])}" data-count="{count}">'
                f'<rect class="bar" x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" '
                f'fill-opacity="{shade:.2f}"/><rect class="axis" x="{x}" y="{y}" width="{cell - 2}" '
                f'height="{cell - 2}" fill="none"/>'
                f'<text x="{x + cell / 2 - 1:.0f}" y="{y + cell / 2 + 3:.0f}" text-anchor="middle"{ink}>'
                f"{count}</text></g>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _facts(record: Mapping[str, Any], score: Mapping[str, Any]) -> str:
    ppi = score.get("ppi") or {}
    calibrated = bool(record.get("calibrated"))
    verdict = "calibrated" if calibrated else "not calibrated"
    rows = [
        ("labelled rows", num(record.get("n"))),
        (
            "kappa (quadratic)",
            f"{num(record.get('kappa'), 3)} {interval(record.get('kappa_ci_low'), record.get('kappa_ci_high'))}",
        ),
        ("alpha", num(record.get("alpha"), 3)),
        ("accuracy", num(record.get("accuracy"), 3)),
        ("bias (judge − human)", num(record.get("bias"), 3)),
        (
            "calibration",
            f'<span class="{"status-ok" if calibrated else "status-error"}">{verdict}</span> '
            f"({esc(record.get('statistic'))} ≥ {esc(record.get('min_agreement'))} on ≥ 30 labelled rows)",
        ),
        ("judge mean (naive)", f"{num(score.get('mean'), 3)} {interval(score.get('ci_low'), score.get('ci_high'))}"),
        (
            "human mean (PPI)",
            f"{num(ppi.get('mean'), 3)} {interval(ppi.get('ci_low'), ppi.get('ci_high'))}"
            f" · {num(ppi.get('n_labelled'))} labelled + {num(ppi.get('n_unlabelled'))} judged only",
        ),
    ]
    return facts_table(rows)


def judge_section(results: Mapping[str, Any]) -> str:
    """The "Judge agreement" section, one panel per calibrated judge score; empty without ``judge_agreement``."""
    records: Sequence[Any] = results.get("judge_agreement") or []
    scores = scores_by_name(results)
    panels = []
    for record in records:
        if not isinstance(record, Mapping) or not isinstance(record.get("confusion"), Mapping):
            continue
        name = str(record.get("score"))
        panels.append(
            f'<figure class="judge" data-score="{attr(name)}"><figcaption>{esc(name)}</figcaption>'
            f'<div class="side"><div>{confusion_heatmap(name, record["confusion"])}</div>'
            f"<div>{_facts(record, scores.get(name) or {})}</div></div></figure>"
        )
    if not panels:
        return ""
    return (
        '<section id="judges"><h2>Judge agreement</h2><p class="sub">Each judge score against the human labels: '
        "rows are the person's label, columns the judge's, the diagonal agreement. The PPI mean estimates the mean "
        "human score from every judged row, corrected by the labelled ones.</p>" + "".join(panels) + "</section>"
    )
