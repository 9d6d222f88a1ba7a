"""What failed in a run, by cause: read from ``errors/`` as it streams, for the summary and results.json.

The summary used to print ``ok: 0 errors: 200`` and nothing else; a user then had to open
``errors/`` to learn that every row failed for one reason. The records are read once, line
by line, and folded into counts by phase, metric and cause (at most ``MAX_CAUSES``
distinct causes are tracked, so a run with a million different messages stays small).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from apache_beam.io.filesystems import FileSystems

__all__ = ["MAX_CAUSES", "failure_breakdown", "format_failures"]

MAX_CAUSES = 10_000
_NUMBERS = re.compile(r"\b(row|line) \d+\b")


def failure_breakdown(output: str, top: int = 5) -> dict[str, Any]:
    """Counts of ``errors/`` records by phase, by metric and by cause (the ``top`` most common)."""
    by_phase: Counter[str] = Counter()
    by_metric: Counter[str] = Counter()
    causes: Counter[tuple[str, str, str]] = Counter()
    matched = FileSystems.match([FileSystems.join(output, "errors", "*.jsonl")])[0].metadata_list
    for meta in sorted(matched, key=lambda m: m.path):
        with FileSystems.open(meta.path) as handle:
            for line in handle:
                if not line.strip():
                    continue
                record = json.loads(line)
                phase, metric = str(record.get("phase")), record.get("metric") or ""
                by_phase[phase] += 1
                if metric:
                    by_metric[metric] += 1
                cause = _NUMBERS.sub(r"\1 N", str(record.get("error", "")).split("; ")[0])[:300]
                key = (phase, metric, cause)
                if key in causes or len(causes) < MAX_CAUSES:
                    causes[key] += 1
    return {
        "by_phase": dict(sorted(by_phase.items())),
        "by_metric": dict(sorted(by_metric.items())),
        "top_causes": [
            {"phase": phase, "metric": metric or None, "cause": cause, "count": count}
            for (phase, metric, cause), count in causes.most_common(top)
        ],
        "errors_path": FileSystems.join(output, "errors"),
    }


def format_failures(failures: dict[str, Any], rows: int) -> str:
    """The summary's failure lines: the most common causes with counts, and where the records are."""
    causes = failures.get("top_causes") or []
    if not causes:
        return ""
    lines = ["", "most common failures:"]
    for cause in causes:
        where = cause["phase"] + (f", metric {cause['metric']}" if cause["metric"] else "")
        lines.append(f"  {cause['count']:>7} of {rows}  [{where}]  {cause['cause']}")
    lines.append(f"every failed row is in {failures['errors_path']}")
    return "\n".join(lines)


def unparsed_judges(results: dict[str, Any], judge_keys: list[str]) -> list[str]:
    """A warning per LLM judge none of whose scores parsed on any scored row (its replies never matched)."""
    ok = results["counts"].get("ok", 0)
    scores = results["aggregate_scores"]["scores"]
    warnings = []
    for key in judge_keys:
        mine = [s for s in scores if s["name"].startswith(f"{key}.") and not s["name"].endswith(".label")]
        numeric = [s for s in mine if s.get("count") is not None and s.get("nan_count") is not None]
        if ok and numeric and all(s["count"] == 0 for s in numeric):
            nan = max(s["nan_count"] for s in numeric)
            warnings.append(
                f"the judge '{key}' gave no score that could be parsed, in {nan} row(s): check its prompt and "
                f"parser (rows/ keeps each reply in the {key}.nan_reason score's row error)"
            )
    return warnings


def error_rate_exceeded(results: dict[str, Any], max_error_rate: float | None) -> str | None:
    """The message when more than ``max_error_rate`` of the rows failed (None when within it or unset)."""
    counts = results["counts"]
    total = counts.get("samples", counts["rows"])
    if max_error_rate is None or not total:
        return None
    rate = counts["errors"] / total
    if rate <= max_error_rate:
        return None
    return (
        f"{counts['errors']} of {total} rows failed ({rate:.1%}), more than params.max_error_rate "
        f"({max_error_rate:.1%}); the outputs were written, but the run is reported as failed."
    )
