"""Reporting the parity cases: the tables and summary line printed, the findings written to the JSON report.

The comparison itself (:mod:`bench.parity_compare`) only classifies fields; this module
decides what a reader sees and what the exit status says about it.
"""

from __future__ import annotations

import json
from typing import Any

from bench.parity_compare import REL_TOL, VERDICTS, Comparison, show


def report_cases(cases: list[dict[str, Any]], mismatches_only: bool, with_reference: bool) -> int:
    """Print every case's comparison and the summary line; returns the exit status of the parity part.

    Each case's ``comparison`` (a :class:`Comparison`, which is not JSON) is replaced in place
    by plain fields: ``mismatches``, ``within_tolerance``, ``known_differences`` and
    ``per_score``. Returns 1 when a field mismatches or our side lacks an expected score, else 0.
    """
    exit_code = 0
    totals = dict.fromkeys(VERDICTS, 0)
    known: dict[str, str] = {}
    for case in cases:
        comparison = case.pop("comparison", None)
        if case["ours_missing_scores"]:
            exit_code = 1
        if comparison is None:
            continue
        print_table(comparison, mismatches_only)
        print_score_summary(comparison)
        print_row_differences(case.get("row_differences", {}))
        for verdict in totals:
            totals[verdict] += sum(1 for r in comparison.rows if r[4] == verdict)
        case["mismatches"] = _fields_json(comparison.mismatches)
        case["within_tolerance"] = _fields_json([r for r in comparison.rows if r[4] == "~1e-9"])
        case["known_differences"] = dict(comparison.known)
        known.update(comparison.known)
        case["per_score"] = comparison.per_score()
        if comparison.mismatches:
            exit_code = 1
    if with_reference:
        scores = [(c["case"], name, n) for c in cases for name, n in c.get("per_score", {}).items()]
        exact = [name for _c, name, n in scores if not (n["~1e-9"] or n["known"] or n["MISMATCH"])]
        bad = sorted({m["score"] for c in cases for m in c.get("mismatches", [])})
        print(
            f"\nSUMMARY: {len(scores)} scores, {sum(totals.values())} fields: {totals['exact']} exact, "
            f"{totals['~1e-9']} within tolerance (rel {REL_TOL:g}), {totals['known']} known differences, "
            f"{totals['MISMATCH']} mismatched; {len(exact)} scores bit-identical in every field, "
            f"{len(scores) - len(bad) - len(known)} more within tolerance, "
            f"{len(known)} with a known difference ({', '.join(sorted(known)) or 'none'}), "
            f"{len(bad)} mismatched ({', '.join(bad) or 'none'})"
            + (" -> PARITY OK" if not totals["MISMATCH"] and exit_code == 0 else " -> PARITY FAILED")
        )
    else:
        names = sum(len(c["expected_scores"]) for c in cases)
        missing = [m for c in cases for m in c["ours_missing_scores"]]
        print(f"\nSUMMARY: our side only: {names} expected scores, missing: {missing or 'none'}")
    return exit_code


def _fields_json(rows: list[tuple[str, str, Any, Any, str]]) -> list[dict[str, str]]:
    return [{"score": s, "field": f, "ours": show(a), "reference": show(b)} for s, f, a, b, _v in rows]


def print_table(comparison: Comparison, mismatches_only: bool) -> None:
    rows = comparison.mismatches if mismatches_only else comparison.rows
    print(f"\n== case {comparison.case}: {len(comparison.rows)} fields compared ==")
    if not rows:
        print("(no mismatches)")
        return
    width = max(len(r[0]) for r in rows)
    fwidth = max(len(r[1]) for r in rows)
    print(f"{'score':<{width}}  {'field':<{fwidth}}  {'ours':>24}  {'reference':>24}  match")
    for score, key, a, b, verdict in rows:
        print(f"{score:<{width}}  {key:<{fwidth}}  {show(a):>24}  {show(b):>24}  {verdict}")


def print_score_summary(comparison: Comparison) -> None:
    print(f"\n-- case {comparison.case}: per score, fields exact / within tolerance / known difference / mismatched --")
    for score, counts in comparison.per_score().items():
        if counts["MISMATCH"]:
            state = "MISMATCH"
        elif counts["known"]:
            state = f"match except known difference ({comparison.known[score]})"
        else:
            state = "exact" if not counts["~1e-9"] else "match (within tolerance)"
        print(
            f"{score:<46} {counts['exact']:>4} / {counts['~1e-9']:>3} / {counts['known']:>3} / "
            f"{counts['MISMATCH']:>3}   {state}"
        )


def print_row_differences(differences: dict[str, list[dict[str, Any]]]) -> None:
    for score, rows in differences.items():
        if not rows:
            continue
        print(f"\n   rows where {score} differs (first {len(rows)}):")
        for r in rows:
            item = json.dumps(r["item"], ensure_ascii=False)
            item = item if len(item) <= 300 else item[:297] + "..."
            print(f"   row {r['row_index']}: ours {r['ours']}, reference {r['reference']}; item {item}")
