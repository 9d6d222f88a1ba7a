"""The one-paragraph verdict messages of ``python -m pipeline.compare`` (what a scheduler's log shows)."""

from __future__ import annotations

from typing import Any

__all__ = ["verdict_message"]


def verdict_message(comparison: dict[str, Any], flips_path: str) -> str:
    """One paragraph: the verdict, the scores behind it, and what to do next.

    Args:
        comparison: the ``comparison.json`` document.
        flips_path: where the flipped rows were written.

    Returns:
        NO-GO names each failing score with its delta and interval, and the flips file;
        INCONCLUSIVE says how many paired rows would decide each undecided score; GO
        summarises the gated scores.
    """
    verdict = comparison["verdict"]
    scores = [s for s in comparison["scores"] if s["gated"]]
    level = f"{100 * (1 - comparison['policy']['alpha']):g}%"
    counts = _counts(comparison["counts"])
    if verdict == "NO-GO":
        failing = [s for s in scores if s["verdict"] == "NO-GO"]
        parts = "; ".join(f"{s['name']} {_delta(s, level)}" for s in failing)
        changed = (comparison.get("flips") or {}).get("rows")
        rows = "The" if changed is None else f"{changed:,} rows changed a score; the"
        return (
            f"NO-GO: {len(failing)} of {len(scores)} gated scores dropped by more than allowed: {parts}. "
            f"{rows} regressed and improved rows, with both outputs side by side, are in {flips_path}.{counts}"
        )
    if verdict == "INCONCLUSIVE":
        undecided = [s for s in scores if s["verdict"] == "INCONCLUSIVE"]
        parts = "; ".join(f"{s['name']} {_delta(s, level)}: {_needed(s)}" for s in undecided)
        return (
            f"INCONCLUSIVE: {len(undecided)} of {len(scores)} gated scores cannot be decided on "
            f"{comparison['counts']['paired']} paired rows: {parts}. Compare on more rows, or raise max_drop in the "
            f"policy if a drop of that size is acceptable.{counts}"
        )
    if not scores:
        return f"GO: the policy gates no score; {len(comparison['scores'])} scores are reported only.{counts}"
    parts = "; ".join(f"{s['name']} {_delta(s, level)}" for s in scores)
    return (
        f"GO: every gated score is at worst within its allowed drop on {comparison['counts']['paired']} paired rows: "
        f"{parts}.{counts}"
    )


def _delta(score: dict[str, Any], level: str) -> str:
    if score["delta"] is None:
        return "(no paired rows)"
    interval = "" if score["ci_low"] is None else f", {level} CI [{score['ci_low']:+.4g}, {score['ci_high']:+.4g}]"
    p_value = score["p_value_adjusted"] if score["p_value_adjusted"] is not None else score["p_value"]
    test = "" if p_value is None else f", {score['test']} p={p_value:.3g}"
    return f"(delta {score['delta']:+.4g}{interval}{test}, max_drop {score['max_drop']:g})"


def _needed(score: dict[str, Any]) -> str:
    needed = score.get("rows_needed")
    if needed is None:
        if score["n_paired"] < 2:
            return "at least 2 paired rows are needed to measure the spread"
        return "its delta sits exactly on -max_drop, which no number of rows decides"
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
            "candidate and were left out"
        )
    return f" ({'; '.join(notes)}.)" if notes else ""
