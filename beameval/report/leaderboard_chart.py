"""The leaderboard as a chart: one panel per score, each target's mean and interval on that score's own axis.

Scores live on different scales (exact-match 0-1, a judge's 1-5, BLEU 0-100), so every
score gets its own axis, fitted to its known range when the run recorded one: a 1-5 judge
score is never squashed beside 0-1 scores. The best mean of a score is drawn and labelled
as such, the worst too (the report's reader looks for exactly those first).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beameval.report.charts import value_domain
from beameval.report.html import attr, esc, num

__all__ = ["ranked_targets", "score_panel"]


def ranked_targets(means: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The best and the worst target by mean (None where fewer than two targets have a mean)."""
    known = {name: float(mean) for name, mean in means.items() if isinstance(mean, int | float) and mean == mean}
    if len(known) < 2 or len(set(known.values())) < 2:
        return None, None
    return max(known, key=lambda n: known[n]), min(known, key=lambda n: known[n])


def score_panel(name: str, scores: Mapping[str, Mapping[str, Any]], width: int = 520) -> str:
    """One score's panel: a line per target with its mean (dot) and interval (whisker) on the score's axis.

    Args:
        name: the score name.
        scores: target name -> that target's aggregate record of the score (``mean``,
            ``ci_low``, ``ci_high``, ``range``), in the leaderboard's order.
        width: the SVG width in pixels.
    """
    label_w, value_w, row_h, top, axis_h = 130, 150, 22, 8, 22
    plot_w = width - label_w - value_w
    targets = list(scores)
    known_range = next((s.get("range") for s in scores.values() if isinstance(s.get("range"), list)), None)
    values = [s.get(k) for s in scores.values() for k in ("mean", "ci_low", "ci_high")]
    lo, hi = (float(known_range[0]), float(known_range[1])) if known_range else value_domain(values)
    span = (hi - lo) or 1.0
    best, worst = ranked_targets({t: s.get("mean") for t, s in scores.items()})

    def x(value: float) -> float:
        return label_w + max(0.0, min(1.0, (value - lo) / span)) * plot_w

    bottom = top + row_h * len(targets)
    parts = [
        f'<svg class="chart lb" role="img" data-score="{attr(name)}" viewBox="0 0 {width} {bottom + axis_h}" '
        f'width="{width}" height="{bottom + axis_h}" xmlns="http://www.w3.org/2000/svg"><title>{esc(name)}: mean and '
        "interval per target</title>",
        f'<line class="axis" x1="{label_w}" y1="{bottom}" x2="{label_w + plot_w}" y2="{bottom}"/>',
        f'<text class="tick" x="{label_w}" y="{bottom + 14}" text-anchor="start">{num(lo, 2)}</text>',
        f'<text class="tick" x="{label_w + plot_w}" y="{bottom + 14}" text-anchor="end">{num(hi, 2)}</text>',
    ]
    for i, target in enumerate(targets):
        score = scores[target]
        y = top + i * row_h + row_h / 2
        rank = "best" if target == best else "worst" if target == worst else ""
        parts.append(f'<g class="target {rank}" data-target="{attr(target)}">')
        parts.append(f'<text x="4" y="{y + 4}">{esc(target)}</text>')
        low, high, mean = score.get("ci_low"), score.get("ci_high"), score.get("mean")
        if isinstance(low, int | float) and isinstance(high, int | float):
            parts.append(f'<line class="whisker" x1="{x(low):.1f}" y1="{y}" x2="{x(high):.1f}" y2="{y}"/>')
        if isinstance(mean, int | float) and mean == mean:
            parts.append(f'<circle class="pt {rank}" cx="{x(mean):.1f}" cy="{y}" r="4.5"/>')
        label = f"{num(mean)}" + (f" ({rank})" if rank else "")
        parts.append(f'<text x="{width - value_w + 8}" y="{y + 4}">{esc(label)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)
