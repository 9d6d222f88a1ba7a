"""The run report's pairwise panel: how often the row's answer beat the baseline's, and whether the judge can tell.

One panel per entry of ``results.json``'s ``pairwise``: a bar per outcome (win, tie, loss
for this target's answer against the first target's), with its rows and share, beside the
position flip rate: the share of judged rows whose verdict changed when the two answers
swapped places. A high flip rate says the judge reads the order, not the answers; those
rows are counted as ties, so the wins and losses that remain held in both orders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beameval.report.html import attr, esc, facts_table, interval, num, scores_by_name

__all__ = ["outcome_bars", "pairwise_section"]

#: Outcome, results.json count key, bar colour.
_OUTCOMES = (("win", "wins", "var(--ok)"), ("tie", "ties", "var(--muted)"), ("loss", "losses", "var(--bad)"))


def outcome_bars(name: str, record: Mapping[str, Any], width: int = 340) -> str:
    """One horizontal bar per outcome (win, tie, loss) with its rows and share of the scored rows."""
    counts = [int(record.get(key) or 0) for _, key, _ in _OUTCOMES]
    total, peak = sum(counts), max(counts) or 1
    label_w, value_w, row_h, top = 50, 90, 28, 8
    bar_w = width - label_w - value_w
    height = top * 2 + row_h * len(_OUTCOMES)
    parts = [
        f'<svg class="chart outcomes" data-score="{attr(name)}" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(name)}: {total:,} rows by outcome against the baseline</title>",
    ]
    for i, ((outcome, _, colour), count) in enumerate(zip(_OUTCOMES, counts, strict=True)):
        y = top + i * row_h
        share = f"{count / total:.0%}" if total else "–"
        parts.append(
            f'<g class="outcome" data-outcome="{outcome}" data-count="{count}">'
            f'<text x="{label_w - 6}" y="{y + 18}" text-anchor="end">{outcome}</text>'
            f'<rect x="{label_w}" y="{y + 4}" width="{max(count / peak * bar_w, 1.0):.1f}" height="{row_h - 8}" '
            f'style="fill:{colour}"/><text x="{label_w + bar_w + 6}" y="{y + 18}">{count:,} · {share}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _facts(record: Mapping[str, Any], score: Mapping[str, Any]) -> str:
    rate = record.get("position_flip_rate")
    flips = f"{num(rate, 3)} ({num(record.get('position_flips'))} of {num(record.get('judged'))} judged rows)"
    rows = [
        ("judged in both orders", num(record.get("judged"))),
        ("position flip rate", flips),
        (
            "win rate (ties ½)",
            f"{num(score.get('mean'), 3)} {interval(score.get('ci_low'), score.get('ci_high'))}",
        ),
    ]
    return facts_table(rows)


def pairwise_section(results: Mapping[str, Any]) -> str:
    """The "Pairwise judges" section, one panel per pairwise judge; empty without ``pairwise``."""
    records: Sequence[Any] = results.get("pairwise") or []
    scores = scores_by_name(results)
    panels = []
    for record in records:
        if not isinstance(record, Mapping):
            continue
        name = str(record.get("score"))
        panels.append(
            f'<figure class="pairwise" data-score="{attr(name)}"><figcaption>{esc(name)}</figcaption>'
            f'<div class="side"><div>{outcome_bars(name, record)}</div>'
            f"<div>{_facts(record, scores.get(name) or {})}</div></div></figure>"
        )
    if not panels:
        return ""
    return (
        '<section id="pairwise"><h2>Pairwise judges</h2><p class="sub">This target\'s answer against the first '
        "target's, each row asked twice with the answers swapped. A verdict counts only when both orders agree; "
        "a flip (the verdict follows the position) counts as a tie, and identical answers are ties without "
        "asking.</p>" + "".join(panels) + "</section>"
    )
