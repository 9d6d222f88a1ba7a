"""Charts as inline SVG, rendered in Python: a histogram, an interval bar, a forest plot.

Why SVG from Python rather than a charting library: the charts needed are three simple
shapes, which take ~150 lines here; the smallest offline bundles (Plotly ~3.5 MB,
Vega+Vega-Lite ~800 kB) would be most of the page, need JavaScript to draw anything,
and add a dependency to keep current. Inline SVG draws with scripts disabled, prints,
and every label is plain text in the DOM (which is what the browser tests read).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from beameval.report.html import attr, esc, num

__all__ = ["forest_plot", "histogram", "interval_bar", "value_domain"]


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def value_domain(values: Sequence[Any]) -> tuple[float, float]:
    """A plotting range covering ``values``; ``[0, 1]`` when they all lie in it (most scores do)."""
    finite = [v for v in (_finite(x) for x in values) if v is not None]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    if low >= 0.0 and high <= 1.0:
        return 0.0, 1.0
    if low == high:
        return low - 1.0, high + 1.0
    pad = (high - low) * 0.05
    return low - pad, high + pad


def histogram(name: str, score: Mapping[str, Any], width: int = 340, height: int = 150) -> str:
    """An SVG histogram of a score's ``histogram.bins``, with the mean marked; empty without bins."""
    bins = [b for b in ((score.get("histogram") or {}).get("bins") or []) if isinstance(b, Mapping)]
    if not bins:
        return ""
    left, right, top, bottom = 34, 8, 8, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    counts = [int(b.get("count") or 0) for b in bins]
    peak = max(counts) or 1
    lows = [_finite(b.get("lower_bound")) for b in bins]
    highs = [_finite(b.get("upper_bound")) for b in bins]
    lo = min((v for v in lows if v is not None), default=0.0)
    hi = max((v for v in highs if v is not None), default=1.0)
    span = (hi - lo) or 1.0
    parts = [
        f'<svg class="chart histogram" data-score="{attr(name)}" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(name)}: histogram of {sum(counts):,} values</title>",
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
    ]
    for count, b_lo, b_hi in zip(counts, lows, highs, strict=True):
        if b_lo is None or b_hi is None:
            continue
        x = left + (b_lo - lo) / span * plot_w
        w = max(1.0, (b_hi - b_lo) / span * plot_w - 1.0)
        h = count / peak * plot_h
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{w:.1f}" height="{h:.1f}">'
            f"<title>[{num(b_lo)}, {num(b_hi)}]: {count:,}</title></rect>"
        )
    mean = _finite(score.get("mean"))
    if mean is not None:
        x = left + (mean - lo) / span * plot_w
        parts.append(f'<line class="mark" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}"/>')
    parts += [
        f'<text x="{left}" y="{height - 6}">{num(lo, 2)}</text>',
        f'<text x="{left + plot_w}" y="{height - 6}" text-anchor="end">{num(hi, 2)}</text>',
        f'<text x="{left - 4}" y="{top + 9}" text-anchor="end">{peak:,}</text>',
        f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>',
        "</svg>",
    ]
    return "".join(parts)


def interval_bar(
    mean: Any, low: Any, high: Any, domain: tuple[float, float], width: int = 150, height: int = 16
) -> str:
    """A small horizontal bar to ``mean`` with a whisker from ``low`` to ``high`` (a group table cell)."""
    m = _finite(mean)
    if m is None:
        return ""
    d_lo, d_hi = domain
    span = (d_hi - d_lo) or 1.0

    def x(value: float) -> float:
        return max(0.0, min(width, (value - d_lo) / span * width))

    origin = x(max(d_lo, min(d_hi, 0.0)))
    parts = [
        f'<svg class="ibar" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<rect class="bar" x="{min(origin, x(m)):.1f}" y="4" width="{abs(x(m) - origin):.1f}" height="8" '
        'opacity="0.75"/>',
    ]
    lo, hi = _finite(low), _finite(high)
    if lo is not None and hi is not None:
        mid = height / 2
        parts.append(
            f'<line class="whisker" x1="{x(lo):.1f}" y1="{mid}" x2="{x(hi):.1f}" y2="{mid}"/>'
            f'<line class="whisker" x1="{x(lo):.1f}" y1="3" x2="{x(lo):.1f}" y2="{height - 3}"/>'
            f'<line class="whisker" x1="{x(hi):.1f}" y1="3" x2="{x(hi):.1f}" y2="{height - 3}"/>'
        )
    parts.append("</svg>")
    return "".join(parts)


def forest_plot(scores: Sequence[Mapping[str, Any]], thresholds: Mapping[str, float], width: int = 980) -> str:
    """One line per score: delta with its interval, the zero line and the gate (``-max_drop``), dashed.

    Each line has its own scale, centred on zero (scores live in different units: BLEU
    0-100, F1 0-1), so the plot compares each delta with its own gate, not deltas with
    each other.

    Args:
        scores: comparison.json ``scores`` entries (``name``, ``delta``, ``ci_low``, ``ci_high``, ``verdict``).
        thresholds: ``max_drop`` per gated score name; scores not named are drawn without a gate.
        width: the SVG width in pixels.

    Returns:
        The SVG element, or an empty string when no score has a delta.
    """
    shown = [s for s in scores if _finite(s.get("delta")) is not None]
    if not shown:
        return ""
    label_w, value_w, row_h = 250, 260, 30
    plot_x, plot_w = label_w, width - label_w - value_w
    height = row_h * len(shown) + 24
    parts = [
        f'<svg class="chart forest" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'xmlns="http://www.w3.org/2000/svg"><title>delta (candidate - baseline) per score, with intervals</title>',
    ]
    for i, score in enumerate(shown):
        name = str(score.get("name", ""))
        delta = float(score["delta"])
        lo, hi = _finite(score.get("ci_low")), _finite(score.get("ci_high"))
        gate = thresholds.get(name)
        # Zero in the middle: left is worse, right is better, whatever the units.
        reach = max(abs(v) for v in (delta, lo or 0.0, hi or 0.0, gate or 0.0)) * 1.15 or 0.01
        d_lo, span = -reach, 2 * reach

        def x(value: float, d_lo: float = d_lo, span: float = span) -> float:
            return plot_x + (value - d_lo) / span * plot_w

        y = 14 + i * row_h + row_h / 2
        verdict = str(score.get("verdict") or "")
        parts.append(f'<g class="score" data-score="{attr(name)}">')
        parts.append(f'<text x="4" y="{y + 4}">{esc(name)}</text>')
        parts.append(f'<line class="zero" x1="{x(0.0):.1f}" y1="{y - 11}" x2="{x(0.0):.1f}" y2="{y + 11}"/>')
        if gate is not None:
            parts.append(
                f'<line class="gate" x1="{x(-gate):.1f}" y1="{y - 12}" x2="{x(-gate):.1f}" y2="{y + 12}">'
                f"<title>gate: delta must stay above -{num(gate)}</title></line>"
            )
        if lo is not None and hi is not None:
            parts.append(f'<line class="whisker" x1="{x(lo):.1f}" y1="{y}" x2="{x(hi):.1f}" y2="{y}"/>')
        parts.append(f'<circle class="pt {attr(verdict)}" cx="{x(delta):.1f}" cy="{y}" r="4.5"/>')
        ci = f" [{num(lo)}, {num(hi)}]" if lo is not None and hi is not None else ""
        parts.append(f'<text x="{width - value_w + 8}" y="{y + 4}">{num(delta)}{ci} {esc(verdict)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)
