"""The page of a multi-target run: the leaderboard, the comparisons, and the prompt x model matrix.

Pure: it takes the run's top-level ``results.json`` and ``comparison.json`` documents (and
the matrix's rows, read by ``pipeline.report``) and returns HTML built from the shared
helpers of :mod:`beameval.report.html`. The leaderboard is a chart per score (each on its
own axis) and a table with the best and worst mean of each score marked; each comparison
has its per-score table and its per-group verdicts in a table of their own. Each target's
name links to its own report (``targets/NAME/report.html``), relative to this page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from beameval.report.decision import decision_section
from beameval.report.html import attr, esc, interval, num, page, pval, table
from beameval.report.leaderboard_chart import ranked_targets, score_panel
from beameval.report.matrix import MatrixRow, matrix_section
from beameval.report.rows import reference_fields, row_columns

__all__ = ["render_leaderboard_report"]

ScoresOf = Callable[[Mapping[str, Any]], list[Mapping[str, Any]]]


def render_leaderboard_report(
    results: Mapping[str, Any],
    comparison: Mapping[str, Any] | None,
    matrix: Sequence[MatrixRow] = (),
    total_rows: int = 0,
) -> str:
    """The whole page: the leaderboard chart and table, each group's table, the comparisons, then the matrix.

    Args:
        results: the multi-target run's top-level results.json.
        comparison: its comparison.json, or None with a single target.
        matrix: the rows of the prompt x model matrix (a bounded sample), or none.
        total_rows: how many rows the run has, for the matrix's note.
    """
    targets = list(results.get("targets") or [])
    entries = list(results.get("leaderboard") or [])
    body = [
        "<main>",
        f"<h1>Leaderboard: {len(targets)} targets</h1>",
        f'<p class="sub">baseline of the comparisons: {esc(targets[0] if targets else "–")}</p>',
        f'<section id="leaderboard"><h2>Scores</h2>{_charts(entries)}'
        f"{_scores_table(entries, lambda entry: list(entry['scores']))}</section>",
    ]
    for by, value in _groups(entries):
        pick = _group_scores(by, value)
        body.append(f"<section><h2>Group {esc(by)} = {esc(value)}</h2>{_scores_table(entries, pick)}</section>")
    if comparison is not None:
        body.append(_comparisons(comparison))
    decision = results.get("decision")  # --decide: each candidate's bounds against the first target
    if isinstance(decision, Mapping):
        for name, block in (decision.get("candidates") or {}).items():
            body.append(f"<h2>{esc(name)} against {esc(targets[0] if targets else '–')}</h2>{decision_section(block)}")
    if matrix:
        names = [str(s["name"]) for s in (entries[0]["scores"] if entries else []) if s.get("mean") is not None]
        config = results.get("config") or {}
        columns = row_columns(results)
        body.append(matrix_section(targets, matrix, names, columns, reference_fields(config), total_rows))
    body.append("</main>")
    return page("Leaderboard", "".join(body))


def _link(name: Any) -> str:
    return f'<a href="targets/{attr(name)}/report.html">{esc(name)}</a>'


def _score_names(entries: Sequence[Mapping[str, Any]], scores_of: ScoresOf) -> list[str]:
    names: list[str] = []
    for entry in entries:
        names += [str(s["name"]) for s in scores_of(entry) if str(s["name"]) not in names]
    return names


def _charts(entries: Sequence[Mapping[str, Any]]) -> str:
    """One panel per score with every target's mean and interval on the score's own axis."""
    panels = []
    for name in _score_names(entries, lambda entry: list(entry["scores"])):
        scores = {str(e["target"]): s for e in entries for s in e["scores"] if str(s["name"]) == name}
        if any(isinstance(s.get("mean"), int | float) for s in scores.values()):
            panels.append(f"<figure>{score_panel(name, scores)}<figcaption>{esc(name)}</figcaption></figure>")
    return f'<div class="lb-charts">{"".join(panels)}</div>' if panels else ""


def _scores_table(entries: Sequence[Mapping[str, Any]], scores_of: ScoresOf) -> str:
    """One row per target, one column per score: mean, interval and count; each score's best and worst marked."""
    names = _score_names(entries, scores_of)
    ranks = {
        name: ranked_targets(
            {str(e["target"]): s.get("mean") for e in entries for s in scores_of(e) if str(s["name"]) == name}
        )
        for name in names
    }
    head = "".join(f"<th>{esc(n)}</th>" for n in names)
    rows = []
    for entry in entries:
        found = {str(s["name"]): s for s in scores_of(entry)}
        target = str(entry["target"])
        cells = [f"<th>{_link(target)}</th>"]
        for name in names:
            s = found.get(name)
            best, worst = ranks[name]
            rank = "best" if target == best else "worst" if target == worst else ""
            cells.append(
                "<td>–</td>"
                if s is None
                else f'<td class="{rank}" data-rank="{rank}"><span class="num">{num(s.get("mean"))}</span> '
                f'<span class="interval">{interval(s.get("ci_low"), s.get("ci_high"))}</span> '
                f'<span class="sub">n={num(s.get("count"))}{" · " + rank if rank else ""}</span></td>'
            )
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table class="grid leaderboard"><thead><tr><th>target</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _groups(entries: Sequence[Mapping[str, Any]]) -> list[tuple[Any, Any]]:
    seen: list[tuple[Any, Any]] = []
    for entry in entries:
        for group in entry.get("groups") or []:
            key = (group["by"], group["value"])
            if key not in seen:
                seen.append(key)
    return seen


def _group_scores(by: Any, value: Any) -> ScoresOf:
    def scores(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        for group in entry.get("groups") or []:
            if group["by"] == by and group["value"] == value:
                return list(group["scores"])
        return []

    return scores


def _comparisons(comparison: Mapping[str, Any]) -> str:
    correction = comparison.get("correction") or {}
    parts = [
        '<section id="comparisons"><h2>Comparisons with the baseline</h2>',
        f'<p class="sub">p_reg_adj: {esc(correction.get("method"))} across the {num(correction.get("gated_scores"))} '
        f"gated scores of {num(correction.get('comparisons'))} comparisons (groups included)</p>",
    ]
    head = ["score", "n", "baseline", "candidate", "delta", "interval", "margin", "p_reg_adj", "verdict"]
    for entry in comparison.get("comparisons") or []:
        rows = [
            [
                esc(s.get("name")),
                num(s.get("n_paired")),
                num(s.get("baseline_mean")),
                num(s.get("candidate_mean")),
                num(s.get("delta")),
                interval(s.get("ci_low"), s.get("ci_high")),
                num(s.get("margin")),
                pval(s.get("p_regression_adjusted")),
                _verdict(s.get("verdict") or "reported"),
            ]
            for s in entry.get("scores") or []
        ]
        parts.append(
            f"<h3>{_link(entry.get('target'))}: {_verdict(entry.get('verdict'))}</h3>"
            f'<p class="sub">{esc(entry.get("message"))}</p><div class="scroll">{table(head, rows)}</div>'
            f"{_group_verdicts(entry)}"
        )
    return "".join(parts) + "</section>"


def _verdict(verdict: Any) -> str:
    return f'<b class="v-{attr(verdict)}">{esc(verdict)}</b>'


def _group_verdicts(entry: Mapping[str, Any]) -> str:
    """A comparison's gated group scores, one line each (their verdicts were only in prose before)."""
    head = ["group", "score", "n", "delta", "interval", "margin", "p_reg_adj", "verdict"]
    rows = [
        [
            f"{esc(group.get('by'))} = {esc(group.get('value'))}",
            esc(s.get("name")),
            num(group.get("n_paired")),
            num(s.get("delta")),
            interval(s.get("ci_low"), s.get("ci_high")),
            num(s.get("margin")),
            pval(s.get("p_regression_adjusted")),
            _verdict(s.get("verdict")),
        ]
        for group in entry.get("groups") or []
        for s in group.get("scores") or []
        if s.get("gated")
    ]
    if not rows:
        return ""
    grid = table(head, rows, cls="grid group-verdicts")
    return f'<h4>per group</h4><div class="scroll">{grid}</div>'
