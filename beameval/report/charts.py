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

__all__ = ["forest_plot", "histogram", "interval_bar", "rubric_bars", "value_domain"]


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


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering ``[low, high]`` (steps of 1, 2 or 5 times a power of ten)."""
    span = high - low
    if not (math.isfinite(span) and span > 0):
        return [low]
    raw = span / max(1, count)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(0.0 if abs(value) < step * 1e-9 else value)
        value += step
    return ticks


def _tick_label(value: float, step: float) -> str:
    """A tick's text with as many decimals as the step needs (``0.05`` -> 2, ``10`` -> 0)."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 2
    return f"{value:.{decimals}f}"


def histogram(name: str, score: Mapping[str, Any], width: int = 340, height: int = 160) -> str:
    """An SVG histogram of a score's ``histogram.bins``, with x ticks and the mean marked and labelled.

    Returns an empty string without bins (rubric scores have a ``rubric_distribution``
    instead: :func:`rubric_bars`).
    """
    bins = [b for b in ((score.get("histogram") or {}).get("bins") or []) if isinstance(b, Mapping)]
    if not bins:
        return ""
    left, right, top, bottom = 34, 10, 18, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    counts = [int(b.get("count") or 0) for b in bins]
    peak = max(counts) or 1
    lows = [_finite(b.get("lower_bound")) for b in bins]
    highs = [_finite(b.get("upper_bound")) for b in bins]
    lo = min((v for v in lows if v is not None), default=0.0)
    hi = max((v for v in highs if v is not None), default=1.0)
    span = (hi - lo) or 1.0

    def x(value: float) -> float:
        return left + (value - lo) / span * plot_w

    parts = [
        f'<svg class="chart histogram" data-score="{attr(name)}" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(name)}: histogram of {sum(counts):,} values</title>",
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
    ]
    for count, b_lo, b_hi in zip(counts, lows, highs, strict=True):
        if b_lo is None or b_hi is None:
            continue
        w = max(1.0, (b_hi - b_lo) / span * plot_w - 1.0)
        h = count / peak * plot_h
        parts.append(
            f'<rect class="bar" x="{x(b_lo):.1f}" y="{top + plot_h - h:.1f}" width="{w:.1f}" height="{h:.1f}">'
            f"<title>[{num(b_lo)}, {num(b_hi)}]: {count:,}</title></rect>"
        )
    ticks = _ticks(lo, hi, 4)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else span
    for tick in ticks:
        parts.append(
            f'<line class="axis" x1="{x(tick):.1f}" y1="{top + plot_h}" x2="{x(tick):.1f}" y2="{top + plot_h + 4}"/>'
            f'<text class="tick" x="{x(tick):.1f}" y="{height - 8}" text-anchor="middle">'
            f"{_tick_label(tick, step)}</text>"
        )
    mean = _finite(score.get("mean"))
    if mean is not None:
        at = x(mean)
        anchor = "end" if at > left + plot_w * 0.7 else "start"
        shift = -3 if anchor == "end" else 3
        parts.append(
            f'<line class="mark" x1="{at:.1f}" y1="{top - 4}" x2="{at:.1f}" y2="{top + plot_h}"/>'
            f'<text class="mean-label" x="{at + shift:.1f}" y="{top - 7}" text-anchor="{anchor}">'
            f"mean {num(mean, 3)}</text>"
        )
    parts += [
        f'<text x="{left - 4}" y="{top + 9}" text-anchor="end">{peak:,}</text>',
        f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>',
        "</svg>",
    ]
    return "".join(parts)


def rubric_bars(name: str, score: Mapping[str, Any], width: int = 340) -> str:
    """One horizontal bar per rubric level (label, value, rows, share), from ``rubric_distribution``.

    A rubric judge score's aggregate has no ``histogram`` (its values are a few labels), so
    its distribution is drawn from the label counts instead; empty without levels.
    """
    levels = [d for d in score.get("rubric_distribution") or [] if isinstance(d, Mapping)]
    if not levels:
        return ""
    counts = [int(d.get("count") or 0) for d in levels]
    total, peak = sum(counts), max(counts) or 1
    label_w, value_w, row_h, top = 110, 90, 28, 8
    bar_w = width - label_w - value_w
    height = top * 2 + row_h * len(levels) + 16
    parts = [
        f'<svg class="chart rubric" data-score="{attr(name)}" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(name)}: {total:,} rows by rubric label</title>",
    ]
    for i, (level, count) in enumerate(zip(levels, counts, strict=True)):
        y = top + i * row_h
        w = count / peak * bar_w
        value = _finite(level.get("value"))
        shown = f" ({num(value, 2)})" if value is not None else ""
        share = f"{count / total:.0%}" if total else "–"
        parts.append(
            f'<g class="level" data-label="{attr(level.get("label"))}" data-count="{count}">'
            f'<text x="{label_w - 6}" y="{y + 18}" text-anchor="end">{esc(level.get("label"))}{shown}</text>'
            f'<rect class="bar" x="{label_w}" y="{y + 4}" width="{max(w, 1.0):.1f}" height="{row_h - 8}"/>'
            f'<text x="{label_w + bar_w + 6}" y="{y + 18}">{count:,} · {share}</text></g>'
        )
    mean = _finite(score.get("mean"))
    mode = score.get("mode_category")
    facts = [f"mean {num(mean, 3)}" if mean is not None else "", f"mode {esc(mode)}" if mode else ""]
    parts.append(
        f'<text class="mean-label" x="{label_w}" y="{height - 6}">{" · ".join(f for f in facts if f)}</text></svg>'
    )
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


def forest_plot(scores: Sequence[Mapping[str, Any]], margins: Mapping[str, float], width: int = 980) -> str:
    """One line per score on one common delta axis: the delta, its interval, zero and each gate's ``-margin``.

    The axis has ticks and covers every delta, interval end and margin, so deltas can be
    read against each other and against their gates. Scores in much larger units (BLEU's
    0-100 beside F1's 0-1) share it too; their numbers are printed beside each line.

    Args:
        scores: comparison.json ``scores`` entries (``name``, ``delta``, ``ci_low``, ``ci_high``, ``verdict``).
        margins: the margin (largest allowed drop) per gated score name; others are drawn without a gate.
        width: the SVG width in pixels.

    Returns:
        The SVG element, or an empty string when no score has a delta.
    """
    shown = [s for s in scores if _finite(s.get("delta")) is not None]
    if not shown:
        return ""
    label_w, value_w, row_h, top, axis_h = 230, 250, 28, 10, 30
    plot_x, plot_w = label_w, width - label_w - value_w
    height = top + row_h * len(shown) + axis_h
    bottom = top + row_h * len(shown)
    reach = [0.0]
    for score in shown:
        name = str(score.get("name", ""))
        reach += [v for v in (_finite(score.get(k)) for k in ("delta", "ci_low", "ci_high")) if v is not None]
        if name in margins:
            reach.append(-margins[name])
    lo, hi = min(reach), max(reach)
    pad = (hi - lo) * 0.08 or 0.01
    lo, hi = lo - pad, hi + pad
    span = hi - lo

    def x(value: float) -> float:
        return plot_x + (value - lo) / span * plot_w

    parts = [
        f'<svg class="chart forest" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'xmlns="http://www.w3.org/2000/svg"><title>delta (candidate - baseline) per score, with intervals</title>',
    ]
    ticks = _ticks(lo, hi, 10)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else span
    parts.append(
        f'<g class="x-axis"><line class="axis" x1="{plot_x}" y1="{bottom}" x2="{plot_x + plot_w}" y2="{bottom}"/>'
    )
    for tick in ticks:
        parts.append(
            f'<line class="grid" x1="{x(tick):.1f}" y1="{top}" x2="{x(tick):.1f}" y2="{bottom}"/>'
            f'<text class="tick" x="{x(tick):.1f}" y="{bottom + 14}" text-anchor="middle">'
            f"{_tick_label(tick, step)}</text>"
        )
    parts.append(
        f'<text x="{plot_x + plot_w / 2:.1f}" y="{bottom + 27}" text-anchor="middle">'
        "delta (candidate − baseline), in each score's units</text></g>"
    )
    parts.append(
        f'<line class="zero" x1="{x(0.0):.1f}" y1="{top - 4}" x2="{x(0.0):.1f}" y2="{bottom}">'
        "<title>zero</title></line>"
    )
    for i, score in enumerate(shown):
        name = str(score.get("name", ""))
        delta = float(score["delta"])
        low, high = _finite(score.get("ci_low")), _finite(score.get("ci_high"))
        margin = margins.get(name)
        y = top + i * row_h + row_h / 2
        verdict = str(score.get("verdict") or "")
        parts.append(f'<g class="score" data-score="{attr(name)}">')
        parts.append(f'<text x="4" y="{y + 4}">{esc(name)}</text>')
        if margin is not None:
            parts.append(
                f'<line class="gate" x1="{x(-margin):.1f}" y1="{y - row_h / 2:.1f}" x2="{x(-margin):.1f}" '
                f'y2="{y + row_h / 2:.1f}"><title>−margin: delta must stay above -{num(margin)}</title></line>'
            )
        if low is not None and high is not None:
            parts.append(f'<line class="whisker" x1="{x(low):.1f}" y1="{y}" x2="{x(high):.1f}" y2="{y}"/>')
        parts.append(f'<circle class="pt {attr(verdict)}" cx="{x(delta):.1f}" cy="{y}" r="4.5"/>')
        ci = f" [{num(low)}, {num(high)}]" if low is not None and high is not None else ""
        parts.append(f'<text x="{width - value_w + 8}" y="{y + 4}">{num(delta)}{ci} {esc(verdict)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)
