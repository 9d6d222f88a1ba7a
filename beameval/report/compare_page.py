"""``render_comparison_report``: ``comparison.json`` and its flipped rows as a self-contained HTML page.

Shows who is compared (model, run id, date and rows of each side), the verdict in one
line, every score's delta with its interval and gate on one common axis, the per-score
table (means, delta, interval, margin, the two-sided p and the regression test's p,
saying which is adjusted, MDE, paired counts), the per-group table when the comparison
has groups, and the flipped rows with baseline and candidate outputs side by side.

Both shapes of the gate are read: the margin tests (``margin``, ``p_noninferiority``,
``p_regression``, ``p_regression_adjusted``, ``groups``) and the earlier one
(``max_drop`` in the policy, ``p_value_adjusted``). A flip record is read leniently
(``baseline``/``candidate`` objects with ``output_text`` and ``scores``, or flat
``baseline_output``/``candidate_output`` fields), so the page survives format tweaks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from beameval.report.charts import forest_plot
from beameval.report.html import attr, breakable, esc, interval, kv_table, num, page, pval, redact, table
from beameval.report.rows import TEXT_BUDGET, as_text, cut_text

__all__ = ["GROUP_CAP", "comparison_title", "flip_direction", "gate_thresholds", "render_comparison_report"]

#: Groups drawn per ``by`` field, largest first (as on the run page); the rest are summarised.
GROUP_CAP = 50

#: Flip-record keys shown in the table itself; the rest (item, row indices, …) goes in the detail line.
_SHOWN_FLIP_KEYS = frozenset(
    {"key", "baseline", "candidate", "baseline_output", "candidate_output", "baseline_scores", "candidate_scores"}
)
_SIDES = ("baseline", "candidate")


def gate_thresholds(comparison: Mapping[str, Any]) -> dict[str, float]:
    """The margin (largest allowed drop) per gated score.

    From each score's ``margin`` when the comparison has them (a null margin, or
    ``gated: false``, is a score that is reported, not gated); else the policy's
    ``max_drop``; else 0 for every score, as the earlier gate did without a policy.
    """
    scores = [s for s in comparison.get("scores") or [] if isinstance(s, Mapping)]
    if any("margin" in s for s in scores):
        return {
            str(s.get("name")): float(s["margin"])
            for s in scores
            if isinstance(s.get("margin"), int | float) and s.get("gated", True) is not False
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
    """The comparison page: sides, verdict, forest plot, score table, groups, flipped rows, policy.

    Args:
        comparison: the ``comparison.json`` document.
        flips: flip records (``flips.jsonl``), possibly a bounded sample of them.
        total_flips: how many flips there are in all, when ``flips`` is a sample.

    Returns:
        The HTML document.
    """
    scores = [s for s in comparison.get("scores") or [] if isinstance(s, Mapping)]
    thresholds = gate_thresholds(comparison)
    verdict = str(comparison.get("verdict") or "UNKNOWN")
    title = comparison_title(comparison)
    body = [
        "<main>",
        f"<h1>{esc(title)}</h1>",
        _sides(comparison),
        f'<section id="verdict"><p><span class="verdict {attr(verdict)}">{esc(verdict)}</span> '
        f"{esc(_verdict_line(comparison, scores, thresholds))}</p></section>",
        '<section id="forest"><h2>Deltas (candidate − baseline)</h2><p class="sub">One axis per score scale. '
        "Dot: delta; line: its interval; grey line: zero; red dashes: −margin, the largest drop the gate "
        "allows.</p>" + (_forests(scores, thresholds) or "<p>No score has a delta.</p>") + "</section>",
        _score_table(comparison, scores, thresholds),
        _groups(comparison),
        _flips(flips, total_flips),
        _policy(comparison),
        "</main>",
    ]
    return page(title, "".join(body))


def _side_model(side: Any) -> str | None:
    if not isinstance(side, Mapping):
        return None
    seen = [str(m["model"]) for m in side.get("models_seen") or [] if isinstance(m, Mapping) and m.get("model")]
    return ", ".join(dict.fromkeys(seen)) or (str(side["target_model"]) if side.get("target_model") else None)


def _side_date(side: Any) -> str:
    return str(side.get("finished_at") or side.get("started_at") or "") if isinstance(side, Mapping) else ""


def comparison_title(comparison: Mapping[str, Any]) -> str:
    """``CANDIDATE MODEL vs BASELINE MODEL, DATE`` (the candidate's date), or a generic title without them."""
    base, cand = (_side_model(comparison.get(side)) for side in _SIDES)
    date = _side_date(comparison.get("candidate"))[:10]
    if not (base or cand):
        return "Comparison report" + (f", {date}" if date else "")
    title = f"{cand or 'candidate'} vs {base or 'baseline'} (baseline)"
    return f"{title}, {date}" if date else title


def _sides(comparison: Mapping[str, Any]) -> str:
    """Who is compared: one line per side (model, run id, date, rows, where its outputs are)."""
    counts = comparison.get("counts") or {}
    rows = []
    for side in _SIDES:
        value = comparison.get(side)
        if value is None:
            continue
        info = value if isinstance(value, Mapping) else {"output": value}
        total, failed = counts.get(f"{side}_rows"), counts.get(f"failed_{side}")
        shown = num(total) + (f" ({num(failed)} failed)" if isinstance(failed, int) and failed else "")
        rows.append(
            (
                f"<b>{side}</b>",
                esc(_side_model(info) or "–"),
                f"<code>{esc(info.get('run_id') or '–')}</code>",
                esc(_side_date(info) or "–"),
                shown if total is not None else "–",
                f"<code>{esc(info.get('output') or '–')}</code>",
            )
        )
    if not rows:
        return ""
    key = comparison.get("key")
    paired = counts.get("paired")
    line = " · ".join(
        part
        for part in (
            f"rows paired by <code>{esc(key)}</code>" if key else "",
            f"{num(paired)} paired" if paired else "",
        )
        if part
    )
    return (
        '<section id="sides">'
        + table(["", "model", "run id", "date", "rows", "output"], rows, cls="sides")
        + (f'<p class="sub">{line}</p>' if line else "")
        + "</section>"
    )


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


def _adjustment(comparison: Mapping[str, Any]) -> str:
    """How the gate's p-values were adjusted, for the column heads (``Holm-adjusted``, ``not adjusted``)."""
    policy = comparison.get("policy") or {}
    correction = policy.get("correction", "holm") if isinstance(policy, Mapping) else "holm"
    return "not adjusted" if correction in (None, "none") else f"{str(correction).capitalize()}-adjusted"


Cell = Callable[[Mapping[str, Any], Mapping[str, float]], str]


def _columns(comparison: Mapping[str, Any], scores: Sequence[Mapping[str, Any]]) -> list[tuple[str, Cell]]:
    """The score table's columns: those of the margin tests when present, else those of the earlier gate."""
    adjusted = _adjustment(comparison)

    def has(key: str) -> bool:
        return any(key in s for s in scores)

    def margin(s: Mapping[str, Any], gates: Mapping[str, float]) -> str:
        gate = gates.get(str(s.get("name")))
        return "not gated" if gate is None else f"−{num(gate)}" if gate else "0"

    def ci(s: Mapping[str, Any], _: Mapping[str, float]) -> str:
        level = s.get("confidence_level")
        shown = f"{round(float(level) * 100, 2):g}% " if isinstance(level, int | float) else ""
        return f'{shown}<span class="interval">{interval(s.get("ci_low"), s.get("ci_high"))}</span>'

    def pair_counts(s: Mapping[str, Any], _: Mapping[str, float]) -> str:
        unpaired = [s.get(k) for k in ("unpaired_baseline", "unpaired_candidate")]
        extra = f"<br><small>unpaired {num(unpaired[0])} / {num(unpaired[1])}</small>" if any(unpaired) else ""
        return f'<span class="num">{num(s.get("n_paired"))}</span>{extra}'

    columns: list[tuple[str, Cell]] = [
        ("pairs", pair_counts),
        ("baseline", lambda s, _: num(s.get("baseline_mean"))),
        ("candidate", lambda s, _: num(s.get("candidate_mean"))),
        ("delta", lambda s, _: f"<b>{num(s.get('delta'))}</b><br><small>± {num(s.get('delta_stderr'))} se</small>"),
        ("interval", ci),
        ("margin", margin),
        (
            "p (δ = 0, two-sided, not adjusted)",
            lambda s, _: f"{pval(s.get('p_value'))}<br><small>{esc(s.get('test'))}</small>",
        ),
    ]
    if has("p_regression") or has("p_regression_adjusted"):
        columns.append(
            (
                f"p regression (δ < −margin), {adjusted}",
                lambda s, _: (
                    f"{pval(s.get('p_regression_adjusted'))}"
                    f"<br><small>{pval(s.get('p_regression'))} not adjusted"
                    f"{'' if s.get('margin_test') is None else ' · ' + esc(s.get('margin_test'))}</small>"
                ),
            )
        )
    elif has("p_value_adjusted"):
        columns.append((f"p (δ = 0), {adjusted}", lambda s, _: pval(s.get("p_value_adjusted"))))
    if has("p_noninferiority"):
        columns.append(("p non-inferiority (δ > −margin)", lambda s, _: pval(s.get("p_noninferiority"))))
    columns += [
        ("MDE", lambda s, _: num(s.get("mde"))),
        ("improved / regressed", lambda s, _: f"{num(s.get('improved'))} / {num(s.get('regressed'))}"),
        ("verdict", lambda s, _: f'<b class="v-{attr(s.get("verdict"))}">{esc(s.get("verdict"))}</b>'),
    ]
    return columns


def _forests(scores: Sequence[Mapping[str, Any]], thresholds: Mapping[str, float]) -> str:
    """One forest plot per score scale: a 1-5 judge score's deltas are never squashed beside 0-1 scores' deltas."""
    scales: dict[tuple[float, ...], list[Mapping[str, Any]]] = {}
    for score in scores:
        bounds = score.get("range")
        key = tuple(float(b) for b in bounds) if isinstance(bounds, list | tuple) and len(bounds) == 2 else ()
        scales.setdefault(key, []).append(score)
    if len(scales) <= 1:
        return forest_plot(scores, thresholds)
    parts = []
    for key, members in scales.items():
        plot = forest_plot(members, thresholds)
        if plot:
            label = f"scores on [{num(key[0], 2)}, {num(key[1], 2)}]" if key else "scores of unknown range"
            parts.append(f'<h3 class="scale">{esc(label)}</h3>{plot}')
    return "".join(parts)


def _score_table(comparison: Mapping[str, Any], scores: Sequence[Mapping[str, Any]], gates: Mapping[str, float]) -> str:
    columns = _columns(comparison, scores)
    rows = [[breakable(s.get("name")), *(cell(s, gates) for _, cell in columns)] for s in scores]
    return (
        '<section id="scores"><h2>Scores and paired counts</h2><div class="scroll">'
        + table(["score", *(esc(label) for label, _ in columns)], rows, cls="grid sticky scores")
        + "</div></section>"
    )


def _pairs(group: Mapping[str, Any]) -> int:
    pairs = group.get("n_paired")
    return pairs if isinstance(pairs, int) else 0


def _groups(comparison: Mapping[str, Any]) -> str:
    """Per group (``groups``, when the comparison has them): pairs, and each score's delta, interval and verdict."""
    groups = [g for g in comparison.get("groups") or [] if isinstance(g, Mapping)]
    if not groups:
        return ""
    out = ['<section id="groups"><h2>Groups</h2>']
    for by in dict.fromkeys(str(g.get("by")) for g in groups):
        entries = sorted(
            (g for g in groups if str(g.get("by")) == by),
            key=lambda g: (-_pairs(g), str(g.get("value"))),
        )
        names = list(dict.fromkeys(str(s.get("name")) for g in entries for s in g.get("scores") or []))
        rows = []
        for entry in entries[:GROUP_CAP]:
            found = {str(s.get("name")): s for s in entry.get("scores") or [] if isinstance(s, Mapping)}
            cells = [esc("null" if entry.get("value") is None else entry.get("value")), num(entry.get("n_paired"))]
            for name in names:
                s = found.get(name)
                cells.append(
                    ""
                    if s is None
                    else f'{num(s.get("delta"))} <span class="interval">{interval(s.get("ci_low"), s.get("ci_high"))}'
                    f'</span><br><b class="v-{attr(s.get("verdict"))}">{esc(s.get("verdict"))}</b>'
                )
            rows.append(cells)
        rest = entries[GROUP_CAP:]
        note = (
            f'<p class="note groups-rest" data-by="{attr(by)}">The {GROUP_CAP:,} largest of {len(entries):,} '
            f"groups are shown; comparison.json holds the other {len(rest):,}.</p>"
            if rest
            else ""
        )
        out.append(
            f'<h3>by {esc(by)} ({len(entries):,} groups)</h3>{note}<div class="scroll">'
            + table([esc(by), "pairs", *(breakable(n) for n in names)], rows, cls="grid sticky groups")
            + "</div>"
        )
    out.append("</section>")
    return "".join(out)


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
    skip = {"scores", "verdict", "message", "groups", "baseline", "candidate"}
    rest = [(k, v) for k, v in redact(dict(comparison)).items() if k not in skip]
    return f'<section id="provenance"><h2>Policy and provenance</h2>{kv_table(rest)}</section>' if rest else ""
