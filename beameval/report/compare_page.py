"""``render_comparison_report``: ``comparison.json`` and its flipped rows as a self-contained HTML page.

Shows the verdict in one line, a forest plot of every score's delta with its interval and
the gate, the per-score table (means, delta, interval, test, p-value, MDE, paired counts),
and the flipped rows with baseline and candidate outputs side by side. A flip record is
read leniently (``baseline``/``candidate`` objects with ``output_text`` and ``scores``, or
flat ``baseline_output``/``candidate_output`` fields), so the page survives format tweaks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from beameval.report.charts import forest_plot
from beameval.report.html import attr, esc, interval, kv_table, num, page, redact, table
from beameval.report.rows import TEXT_BUDGET, as_text, cut_text

__all__ = ["flip_direction", "gate_thresholds", "render_comparison_report"]

#: Flip-record keys shown in the table itself; the rest (item, row indices, …) goes in the detail line.
_SHOWN_FLIP_KEYS = frozenset(
    {"key", "baseline", "candidate", "baseline_output", "candidate_output", "baseline_scores", "candidate_scores"}
)

_COLUMNS = [
    ("n_paired", "paired"),
    ("unpaired_baseline", "unpaired (baseline)"),
    ("unpaired_candidate", "unpaired (candidate)"),
    ("baseline_mean", "baseline"),
    ("candidate_mean", "candidate"),
    ("delta", "delta"),
    ("delta_stderr", "stderr"),
    ("test", "test"),
    ("p_regression_adjusted", "p (regression, adjusted)"),
    ("mde", "MDE"),
    ("improved", "improved"),
    ("regressed", "regressed"),
]


def gate_thresholds(comparison: Mapping[str, Any]) -> dict[str, float]:
    """The margin per gated score: each score's ``margin`` (the revised gate), else the policy's ``max_drop``."""
    scores = [s for s in comparison.get("scores") or [] if isinstance(s, Mapping)]
    if any("margin" in s for s in scores):
        return {
            str(s.get("name")): float(s["margin"]) for s in scores if s.get("gated") and s.get("margin") is not None
        }
    policy = comparison.get("policy") or {}
    named = policy.get("scores") if isinstance(policy, Mapping) else None
    if isinstance(named, Mapping) and named:
        return {
            str(k): float(v.get("max_drop", 0.0))
            for k, v in named.items()
            if isinstance(v, Mapping) and isinstance(v.get("max_drop", 0.0), int | float)
        }
    return {str(s.get("name")): 0.0 for s in scores}


def render_comparison_report(
    comparison: Mapping[str, Any], flips: Sequence[Mapping[str, Any]], *, total_flips: int | None = None
) -> str:
    """The comparison page: verdict, forest plot, score table, paired counts, flipped rows, policy.

    Args:
        comparison: the ``comparison.json`` document.
        flips: flip records (``flips.jsonl``), possibly a bounded sample of them.
        total_flips: how many flips there are in all, when ``flips`` is a sample.

    Returns:
        The HTML document.
    """
    scores = [s for s in comparison.get("scores") or [] if isinstance(s, Mapping)]
    thresholds = gate_thresholds(comparison)
    grouped = _group_scores(comparison)
    verdict = str(comparison.get("verdict") or "UNKNOWN")
    title = "Comparison report"
    body = [
        "<main>",
        f"<h1>{esc(title)}</h1>",
        _sides(comparison),
        f'<section id="verdict"><p><span class="verdict {attr(verdict)}">{esc(verdict)}</span> '
        f"{esc(_verdict_line(comparison, scores, thresholds))}</p></section>",
        '<section id="forest"><h2>Deltas (candidate − baseline)</h2><p class="sub">Dot: delta; line: its '
        "interval; grey: zero; red dashes: the gate (−max_drop).</p>"
        + (forest_plot(scores, thresholds) or "<p>No score has a delta.</p>")
        + "</section>",
        _score_table([*scores, *grouped], {**thresholds, **gate_thresholds({"scores": grouped})}),
        _flips(flips, total_flips),
        _policy(comparison),
        "</main>",
    ]
    return page(title, "".join(body))


def _sides(comparison: Mapping[str, Any]) -> str:
    pairs = [(k, comparison[k]) for k in ("baseline", "candidate", "key") if comparison.get(k) is not None]
    return f'<p class="sub">{" · ".join(f"{esc(k)}: {esc(v)}" for k, v in pairs)}</p>' if pairs else ""


def _verdict_line(
    comparison: Mapping[str, Any], scores: Sequence[Mapping[str, Any]], gates: Mapping[str, float]
) -> str:
    if comparison.get("message"):
        return str(comparison["message"])
    gated = [s for s in scores if str(s.get("name")) in gates]
    worse = [str(s["name"]) for s in gated if s.get("verdict") == "NO-GO"]
    open_ = [str(s["name"]) for s in gated if s.get("verdict") == "INCONCLUSIVE"]
    text = f"{len(gated)} gated score{'s' if len(gated) != 1 else ''}"
    if worse:
        text += f"; regressed beyond the gate: {', '.join(worse)}"
    if open_:
        text += f"; undecided: {', '.join(open_)}"
    if not worse and not open_:
        text += "; none dropped beyond its gate"
    return text + "."


def _group_scores(comparison: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each group's scores as table rows named ``field=value: score`` (the revised gate's ``groups``)."""
    return [
        {**s, "name": f"{g.get('by')}={json.dumps(g.get('value'))}: {s.get('name')}"}
        for g in comparison.get("groups") or []
        if isinstance(g, Mapping)
        for s in g.get("scores") or []
        if isinstance(s, Mapping)
    ]


def _score_table(scores: Sequence[Mapping[str, Any]], gates: Mapping[str, float]) -> str:
    head = ["score", *(label for _, label in _COLUMNS[:7]), "interval", *(label for _, label in _COLUMNS[7:])]
    head += ["gate", "verdict"]
    rows = []
    for s in scores:
        cells = [esc(s.get("name"))]
        for key, _ in _COLUMNS[:7]:
            cells.append(f'<span class="num">{num(s.get(key))}</span>')
        level = s.get("confidence_level")
        shown = f"{round(float(level) * 100, 2):g}% " if isinstance(level, int | float) else ""
        cells.append(f'{shown}<span class="interval">{interval(s.get("ci_low"), s.get("ci_high"))}</span>')
        for key, _ in _COLUMNS[7:]:
            cells.append(num(s.get(key)) if key != "test" else esc(s.get(key)))
        gate = gates.get(str(s.get("name")))
        cells.append("not gated" if gate is None else f"max drop {num(gate)}")
        cells.append(f'<b class="v-{attr(s.get("verdict"))}">{esc(s.get("verdict"))}</b>')
        rows.append(cells)
    return (
        f'<section id="scores"><h2>Scores and paired counts</h2><div class="scroll">'
        f"{table([esc(h) for h in head], rows)}</div></section>"
    )


def _side(flip: Mapping[str, Any], side: str) -> tuple[Any, Mapping[str, Any]]:
    block = flip.get(side)
    if isinstance(block, Mapping):
        output = block.get("output_text", block.get("output"))
        scores = block.get("scores") if isinstance(block.get("scores"), Mapping) else {}
        if not scores:
            scores = {k: v for k, v in block.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        return output, scores
    scores = flip.get(f"{side}_scores")
    return flip.get(f"{side}_output", flip.get(f"{side}_output_text")), scores if isinstance(scores, Mapping) else {}


def flip_direction(flip: Mapping[str, Any]) -> str:
    """``regressed``, ``improved`` or ``mixed`` (some scores each way) for a flip record."""
    regressed, improved = flip.get("regressed"), flip.get("improved")
    if isinstance(regressed, list) or isinstance(improved, list):
        return "mixed" if regressed and improved else "regressed" if regressed else "improved"
    for key in ("direction", "change", "kind"):
        if isinstance(flip.get(key), str):
            return str(flip[key])
    _, before = _side(flip, "baseline")
    _, after = _side(flip, "candidate")
    deltas = [
        after[k] - before[k]
        for k in before
        if isinstance(after.get(k), int | float) and isinstance(before[k], int | float)
    ]
    return "regressed" if any(d < 0 for d in deltas) else "improved"


def _flips(flips: Sequence[Mapping[str, Any]], total: int | None) -> str:
    limit = max(200, min(2000, TEXT_BUDGET // max(1, 3 * len(flips))))
    note = ""
    if total is not None and total > len(flips):
        note = (
            f'<p class="note sample">This page holds {len(flips):,} of {total:,} flipped rows (every regression '
            "first, then a seeded random sample); the flips file holds them all.</p>"
        )
    bodies, directions = [], set()
    for flip in flips:
        before_out, before = _side(flip, "baseline")
        after_out, after = _side(flip, "candidate")
        direction = flip_direction(flip)
        directions.add(direction)
        names = [n for n in dict.fromkeys([*before, *after]) if before.get(n) != after.get(n)] or list(before)
        changes = "<br>".join(f"{esc(n)}: {num(before.get(n))} → {num(after.get(n))}" for n in names)
        extra = {k: v for k, v in flip.items() if k not in _SHOWN_FLIP_KEYS}
        detail = esc(cut_text(json.dumps(extra, indent=1, ensure_ascii=False, default=str), limit)) if extra else ""
        bodies.append(
            f'<tbody class="r" data-dir="{attr(direction)}"><tr class="sum"><td>{esc(flip.get("key"))}</td>'
            f"<td>{esc(direction)}</td><td>{changes}</td>"
            f"<td><pre>{esc(cut_text(as_text(before_out), limit))}</pre></td>"
            f"<td><pre>{esc(cut_text(as_text(after_out), limit))}</pre></td></tr>"
            f'<tr class="det" hidden><td colspan="5"><pre>{detail}</pre></td></tr></tbody>'
        )
    options = "".join(f'<option value="{attr(d)}">{esc(d)}</option>' for d in sorted(directions))
    bar = (
        '<div class="filters" data-target="flips-table">'
        '<input type="search" data-filter="q" id="flips-search" placeholder="search keys and outputs">'
        f'<select data-filter="dir"><option value="">regressed and improved</option>{options}</select>'
        '<span class="shown"></span></div>'
    )
    return (
        f'<section id="flips"><h2>Flipped rows</h2>{note}{bar}'
        '<div class="scroll"><table class="browse side-by-side" id="flips-table">'
        "<thead><tr><th>key</th><th>change</th><th>scores (baseline → candidate)</th><th>baseline output</th>"
        f"<th>candidate output</th></tr></thead>{''.join(bodies)}</table></div>"
        '<button class="more" data-for="flips-table" hidden>show more</button></section>'
    )


def _policy(comparison: Mapping[str, Any]) -> str:
    skip = {"scores", "verdict", "message"}
    rest = [(k, v) for k, v in redact(dict(comparison)).items() if k not in skip]
    return f'<section id="provenance"><h2>Policy and provenance</h2>{kv_table(rest)}</section>' if rest else ""
