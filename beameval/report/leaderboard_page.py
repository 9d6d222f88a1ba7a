"""The page of a multi-target run: the leaderboard (means with intervals, per group too) and the comparisons.

Pure: it takes the run's top-level ``results.json`` and ``comparison.json`` documents and
returns HTML built from the shared helpers of :mod:`beameval.report.html`. Each target's
name links to its own report (``targets/NAME/report.html``), relative to this page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beameval.report.decision import decision_section
from beameval.report.html import attr, esc, interval, num, page, table

__all__ = ["render_leaderboard_report"]


def render_leaderboard_report(results: Mapping[str, Any], comparison: Mapping[str, Any] | None) -> str:
    """The whole page: the leaderboard, each group's leaderboard, then one table per comparison."""
    targets = list(results.get("targets") or [])
    entries = list(results.get("leaderboard") or [])
    body = [
        f"<h1>Leaderboard: {len(targets)} targets</h1>",
        f'<p class="sub">baseline of the comparisons: {esc(targets[0] if targets else "–")}</p>',
        f'<section id="leaderboard"><h2>Scores</h2>{_scores_table(entries, lambda entry: entry["scores"])}</section>',
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
    return page("Leaderboard", "".join(body))


def _link(name: Any) -> str:
    return f'<a href="targets/{attr(name)}/report.html">{esc(name)}</a>'


def _scores_table(entries: Sequence[Mapping[str, Any]], scores_of: Any) -> str:
    """One row per target, one column per score: mean and interval, with the count."""
    names: list[str] = []
    for entry in entries:
        names += [str(s["name"]) for s in scores_of(entry) if str(s["name"]) not in names]
    rows = []
    for entry in entries:
        found = {str(s["name"]): s for s in scores_of(entry)}
        cells = [_link(entry["target"])]
        for name in names:
            s = found.get(name)
            cells.append(
                "–"
                if s is None
                else f'<span class="num">{num(s.get("mean"))}</span> '
                f'<span class="interval">{interval(s.get("ci_low"), s.get("ci_high"))}</span> '
                f'<span class="sub">n={num(s.get("count"))}</span>'
            )
        rows.append(cells)
    return f'<div class="scroll">{table(["target", *(esc(n) for n in names)], rows)}</div>'


def _groups(entries: Sequence[Mapping[str, Any]]) -> list[tuple[Any, Any]]:
    seen: list[tuple[Any, Any]] = []
    for entry in entries:
        for group in entry.get("groups") or []:
            key = (group["by"], group["value"])
            if key not in seen:
                seen.append(key)
    return seen


def _group_scores(by: Any, value: Any) -> Any:
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
                num(s.get("p_regression_adjusted")),
                f'<b class="v-{attr(s.get("verdict"))}">{esc(s.get("verdict") or "reported")}</b>',
            ]
            for s in entry.get("scores") or []
        ]
        parts.append(
            f"<h3>{_link(entry.get('target'))}: "
            f'<b class="v-{attr(entry.get("verdict"))}">{esc(entry.get("verdict"))}</b></h3>'
            f'<p class="sub">{esc(entry.get("message"))}</p><div class="scroll">{table(head, rows)}</div>'
        )
    return "".join(parts) + "</section>"
