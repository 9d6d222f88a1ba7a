"""Field-by-field comparison of the two sides' aggregate scores, with the documented tolerance.

Kept apart from running and printing so that the tolerance rules and the recognised known
differences (bench/PARITY.md) are plain functions, unit-tested in
tests/bench/test_parity_smoke.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

REL_TOL = 1e-9
ABS_TOL = 1e-12
SCALAR_FIELDS = ("count", "nan_count", "sum", "mean", "min", "max", "std_dev", "variance", "score_type")
PERCENTILES = ("p10", "p20", "p30", "p40", "p50", "p60", "p70", "p80", "p90", "p100")
MISSING = object()  # a field one side does not report at all
VERDICTS = ("exact", "~1e-9", "known", "MISMATCH")  # what the table says of a compared field


def flatten(score: dict[str, Any]) -> dict[str, Any]:
    """Every compared aggregate field of one score, as ``field path -> value``."""
    flat: dict[str, Any] = {}
    for key in SCALAR_FIELDS:
        flat[key] = score.get(key, MISSING)
    if score.get("score_type") == "rubric" or "rubric_distribution" in score:
        distribution = score.get("rubric_distribution")
        if distribution is None:
            flat["rubric_distribution"] = MISSING if "rubric_distribution" not in score else None
        else:
            flat["rubric_distribution.len"] = len(distribution)
            for index, level in enumerate(distribution):
                for key in ("label", "value", "count", "description"):
                    flat[f"rubric_distribution[{index}].{key}"] = level.get(key, MISSING)
        flat["mode_category"] = score.get("mode_category", MISSING)
    if score.get("score_type", "range") == "range" or "percentiles" in score or "histogram" in score:
        percentiles = score.get("percentiles", MISSING)
        if isinstance(percentiles, dict):
            for p in PERCENTILES:
                flat[f"percentiles.{p}"] = percentiles.get(p, MISSING)
        else:
            flat["percentiles"] = percentiles
        histogram = score.get("histogram", MISSING)
        if isinstance(histogram, dict) and isinstance(histogram.get("bins"), list):
            bins = histogram["bins"]
            flat["histogram.bins.len"] = len(bins)
            for index, b in enumerate(bins):
                for key in ("lower_bound", "upper_bound", "count"):
                    flat[f"histogram.bins[{index}].{key}"] = b.get(key, MISSING)
        else:
            flat["histogram"] = histogram
    return flat


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value == "NaN":  # a JSON dump of NaN
        return math.nan
    return None


def compare_values(ours: Any, ref: Any) -> str:
    """``exact``, ``~1e-9`` (within tolerance) or ``MISMATCH`` (see also :func:`known_difference`)."""
    if ours is MISSING or ref is MISSING:
        return "exact" if ours is ref else "MISMATCH"
    a, b = _number(ours), _number(ref)
    if a is not None and b is not None:
        if math.isnan(a) or math.isnan(b):
            return "exact" if math.isnan(a) and math.isnan(b) else "MISMATCH"
        if a == b:
            return "exact"
        if abs(a - b) <= max(REL_TOL * max(abs(a), abs(b)), ABS_TOL):
            return "~1e-9"
        return "MISMATCH"
    return "exact" if ours == ref else "MISMATCH"


@dataclass
class Comparison:
    case: str
    rows: list[tuple[str, str, Any, Any, str]] = field(default_factory=list)  # score, field, ours, ref, verdict
    known: dict[str, str] = field(default_factory=dict)  # score -> known difference found in it

    @property
    def mismatches(self) -> list[tuple[str, str, Any, Any, str]]:
        return [r for r in self.rows if r[4] == "MISMATCH"]

    def per_score(self) -> dict[str, dict[str, int]]:
        summary: dict[str, dict[str, int]] = {}
        for score, _field, _a, _b, verdict in self.rows:
            counts = summary.setdefault(score, dict.fromkeys(VERDICTS, 0))
            counts[verdict] += 1
        return summary


def _histogram_known(ours: dict[str, Any], ref: dict[str, Any]) -> bool:
    """The reference's last histogram bin lost the values equal to the max (a reference bug).

    The reference puts the last upper bound at ``min + 10 * width``, which rounding can
    leave just below the max (100.00000000000003 < 100.00000000000004 for BLEU), and then
    drops the values above it; its bin counts no longer add up to ``count``. Ours ends the
    last bin at the max itself. Known when exactly that explains the difference.
    """
    try:
        a, b = ours["histogram"]["bins"], ref["histogram"]["bins"]
        if len(a) != len(b) or not b or ref["max"] is None:
            return False
        lost = ref["count"] - sum(x["count"] for x in b)
        return (
            lost > 0
            and b[-1]["upper_bound"] < ref["max"]
            and a[-1]["upper_bound"] == ours["max"]
            and a[-1]["count"] - b[-1]["count"] == lost
            and all(x["count"] == y["count"] for x, y in zip(a[:-1], b[:-1], strict=True))
        )
    except (KeyError, TypeError):
        return False


def known_difference(key: str, ours: dict[str, Any], ref: dict[str, Any], a: Any, b: Any) -> str | None:
    """Why a mismatching field is a known, deliberate difference (bench/PARITY.md), or None."""
    if key.startswith("rubric_distribution[") and key.endswith(".description") and b is None and isinstance(a, str):
        return "rubric-description"  # ours reports the declared level description; the reference always null
    if key.startswith("histogram.bins[") and _histogram_known(ours, ref):
        return "reference-histogram-drops-max"
    return None


def compare_scores(case: str, ours: list[dict[str, Any]], ref: list[dict[str, Any]]) -> Comparison:
    result = Comparison(case)
    ours_by_name = {s["name"]: s for s in ours}
    ref_by_name = {s["name"]: s for s in ref}
    names = [s["name"] for s in ref] + [n for n in ours_by_name if n not in ref_by_name]
    for name in names:
        if name not in ours_by_name or name not in ref_by_name:
            result.rows.append((name, "(score present)", name in ours_by_name, name in ref_by_name, "MISMATCH"))
            continue
        a, b = flatten(ours_by_name[name]), flatten(ref_by_name[name])
        for key in list(b) + [k for k in a if k not in b]:
            va, vb = a.get(key, MISSING), b.get(key, MISSING)
            verdict = compare_values(va, vb)
            if verdict == "MISMATCH":
                reason = known_difference(key, ours_by_name[name], ref_by_name[name], va, vb)
                if reason:
                    verdict = "known"
                    result.known[name] = reason
            result.rows.append((name, key, va, vb, verdict))
    return result


def row_differences(
    ours: dict[str, Any], ref: dict[str, Any], rows: list[dict[str, Any]], limit: int = 5
) -> list[dict[str, Any]]:
    """The rows whose values differ (beyond the tolerance), first ``limit`` of them, with their items."""
    out = []
    for index in sorted(set(ours) | set(ref), key=int):
        a, b = ours.get(index, MISSING), ref.get(index, MISSING)
        if compare_values(a, b) == "MISMATCH":
            out.append({"row_index": int(index), "ours": show(a), "reference": show(b), "item": rows[int(index)]})
            if len(out) >= limit:
                break
    return out


def show(value: Any) -> str:
    """A field's value as the table prints it and the JSON report records it."""
    if value is MISSING:
        return "(absent)"
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
