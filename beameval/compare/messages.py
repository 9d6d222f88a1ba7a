"""The one-paragraph verdict messages of ``python -m pipeline.compare`` (what a scheduler's log shows)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["verdict_message"]


def verdict_message(comparison: dict[str, Any], flips_path: str) -> str:
    """One paragraph: the verdict, the scores behind it, and what to do next.

    Args:
        comparison: the ``comparison.json`` document.
        flips_path: where the flipped rows were written.

    Returns:
        NO-GO names each failing score (group scores as ``field=value: score``) with its delta,
        interval and adjusted p, and the flips file; INCONCLUSIVE says how many paired rows
        would decide each undecided score; GO summarises the gated scores. Notes (a run that
        stopped early) follow.
    """
    verdict = comparison["verdict"]
    scores = [s for s in comparison["scores"] if s["gated"]]
    grouped = [
        (f"{g['by']}={json.dumps(g['value'])}: {s['name']}", s)
        for g in comparison.get("groups") or []
        for s in g["scores"]
        if s["gated"]
    ]
    level = f"{100 * comparison['policy']['confidence_level']:g}%"
    tail = _counts(comparison["counts"]) + "".join(f" {note}" for note in comparison.get("notes") or [])
    paired = comparison["counts"]["paired"]
    if verdict == "NO-GO":
        failing = [(s["name"], s) for s in scores if s["verdict"] == "NO-GO"]
        failing += [(name, s) for name, s in grouped if s["verdict"] == "NO-GO"]
        parts = "; ".join(f"{name} {_delta(s, level)}" for name, s in failing)
        changed = (comparison.get("flips") or {}).get("rows")
        rows = "The" if changed is None else f"{changed:,} rows changed a score; the"
        return (
            f"NO-GO: {len(failing)} of {len(scores) + len(grouped)} gated scores (groups included) dropped by more "
            f"than their margin: {parts}. {rows} regressed and improved rows, with both outputs side by side, are "
            f"in {flips_path}.{tail}"
        )
    if verdict == "INCONCLUSIVE":
        undecided = [s for s in scores if s["verdict"] == "INCONCLUSIVE"]
        parts = "; ".join(f"{s['name']} {_delta(s, level)}: {_needed(s)}" for s in undecided)
        if not undecided:
            return f"INCONCLUSIVE: every gated score is within its margin on {paired} paired rows, but{tail}"
        advice = "Compare on more rows, or raise max_drop in the policy if a drop of that size is acceptable."
        if all(s.get("uncalibrated_judge") for s in undecided):  # more rows would not help: the judge is the doubt
            advice = "Label rows for the judge (beameval judge-labels) until it is calibrated in both runs."
        return (
            f"INCONCLUSIVE: {len(undecided)} of {len(scores)} gated scores cannot be decided on {paired} paired rows: "
            f"{parts}. {advice}{tail}"
        )
    parts = "; ".join(f"{s['name']} {_delta(s, level)}" for s in scores)
    return f"GO: every gated score is at worst within its margin on {paired} paired rows: {parts}.{tail}"


def _delta(score: dict[str, Any], level: str) -> str:
    if score["delta"] is None:
        return "(no paired rows)"
    interval = "" if score["ci_low"] is None else f", {level} CI [{score['ci_low']:+.4g}, {score['ci_high']:+.4g}]"
    p_value = score["p_regression_adjusted"]
    test = "" if p_value is None else f", {score['margin_test']} adjusted p={p_value:.3g}"
    return f"(delta {score['delta']:+.4g}{interval}{test}, margin {score['margin']:g})"


def _needed(score: dict[str, Any]) -> str:
    if score.get("note"):
        return str(score["note"])
    needed = score.get("rows_needed")
    if needed is None:
        if score["n_paired"] < 2:
            return "at least 2 paired rows are needed to measure the spread"
        return "its delta sits on -margin, which no number of rows decides"
    return f"about {needed:,} paired rows would decide it at the observed spread (80% power)"


def _counts(counts: dict[str, Any]) -> str:
    notes = []
    if counts["unpaired_baseline"] or counts["unpaired_candidate"]:
        notes.append(
            f"{counts['unpaired_baseline']} baseline and {counts['unpaired_candidate']} candidate rows had no partner"
        )
    if counts["failed_baseline"] or counts["failed_candidate"]:
        notes.append(
            f"{counts['failed_baseline']} rows failed in the baseline and {counts['failed_candidate']} in the "
            "candidate: left out of the scores, counted in ok_rate"
        )
    return f" ({'; '.join(notes)}.)" if notes else ""
