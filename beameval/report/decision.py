"""The ``--decide`` section of a run report: the verdict, and each gated score's bounds narrowing wave by wave.

One small inline SVG per score: rows evaluated on x, δ (candidate − baseline) on y, the
anytime-valid interval after each wave as a vertical bar, and the gate's ``−margin`` as a
horizontal line: GO is the bar's low end above the line (for every score), NO-GO its high
end below it (for any).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beameval.report.html import attr, esc, num, table

__all__ = ["decision_section", "narrowing_chart"]


def narrowing_chart(name: str, waves: Sequence[Mapping[str, Any]], width: int = 340, height: int = 170) -> str:
    """The SVG of one score's bounds after each wave (see the module docstring); empty without bounds."""
    points = []
    margin = None
    for wave in waves:
        score = next((s for s in wave.get("scores") or [] if s.get("name") == name), None)
        if score is None or score.get("cs_low") is None or score.get("cs_high") is None:
            continue
        margin = score.get("margin")
        points.append((int(wave["rows"]), float(score["cs_low"]), float(score["cs_high"])))
    if not points:
        return ""
    left, right, top, bottom = 48, 10, 10, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for _, low, high in points for v in (low, high)] + ([-float(margin)] if margin is not None else [])
    lo, hi = min(values + [0.0]), max(values + [0.0])
    span = (hi - lo) or 1.0
    most = max(rows for rows, _, _ in points)

    def x(rows: int) -> float:
        return left + rows / most * plot_w

    def y(value: float) -> float:
        return top + (hi - value) / span * plot_h

    parts = [
        f'<svg class="chart narrowing" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg" data-score="{attr(name)}"><title>{esc(name)}: bounds on delta by rows '
        "evaluated</title>",
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
        f'<text class="tick" x="{left}" y="{height - 8}">0</text>',
        f'<text class="tick" x="{left + plot_w}" y="{height - 8}" text-anchor="end">{most} rows</text>',
        f'<text class="tick" x="{left - 4}" y="{y(hi) + 4:.1f}" text-anchor="end">{num(hi, 3)}</text>',
        f'<text class="tick" x="{left - 4}" y="{y(lo) + 4:.1f}" text-anchor="end">{num(lo, 3)}</text>',
        f'<line class="zero" x1="{left}" y1="{y(0.0):.1f}" x2="{left + plot_w}" y2="{y(0.0):.1f}"/>',
    ]
    if margin is not None:
        parts.append(
            f'<line class="gate" x1="{left}" y1="{y(-float(margin)):.1f}" x2="{left + plot_w}" '
            f'y2="{y(-float(margin)):.1f}"><title>−margin ({num(-float(margin))})</title></line>'
        )
    for rows, low, high in points:
        parts.append(
            f'<line class="whisker" x1="{x(rows):.1f}" y1="{y(high):.1f}" x2="{x(rows):.1f}" y2="{y(low):.1f}">'
            f"<title>{rows} rows: [{num(low)}, {num(high)}]</title></line>"
        )
    parts.append("</svg>")
    return "".join(parts)


def decision_section(decision: Mapping[str, Any] | None) -> str:
    """The report's ``decision`` section: verdict, rows used, a chart per gated score and the last wave's bounds."""
    if not isinstance(decision, Mapping) or not decision.get("waves"):
        return ""
    waves = decision["waves"]
    names = [str(s.get("name")) for s in waves[-1].get("scores") or []]
    charts = "".join(f"<figure><figcaption>{esc(n)}</figcaption>{narrowing_chart(n, waves)}</figure>" for n in names)
    last = [
        [
            esc(s.get("name")),
            num(s.get("n")),
            num(s.get("mean_delta")),
            num(s.get("cs_low")),
            num(s.get("cs_high")),
            num(s.get("margin")),
        ]
        for s in waves[-1].get("scores") or []
    ]
    verdict = str(decision.get("verdict") or "undecided")
    return (
        f'<section id="decision"><h2>Early decision (--decide)</h2><p>verdict: <b class="{attr(verdict)}">'
        f"{esc(verdict)}</b> after {num(decision.get('rows_evaluated'))} of {num(decision.get('rows_total'))} rows "
        f"in {len(waves)} wave(s) of {num(decision.get('wave_rows'))} (seed {esc(decision.get('seed'))}); "
        f"{num(decision.get('requests_sent'))} requests sent. The bounds are an anytime-valid confidence sequence "
        "on delta (candidate − baseline): GO once every score's low end is at or above −margin, NO-GO once any "
        "score's high end is below it.</p>"
        f'<div class="charts">{charts}</div>'
        + table(["score", "pairs", "mean delta", "low", "high", "margin"], last)
        + "</section>"
    )
