"""What the command line prints after a run: the summary table, and user errors dug out of Beam's wrappers."""

from __future__ import annotations

import re
from typing import Any

from beameval.core.errors import EvaluatorError

__all__ = ["format_summary_table", "unwrap_pipeline_error"]

#: What Beam appends to an exception re-raised from a step.
_STEP_ANNOTATION = re.compile(r" \[while running '[^']*'\]")


def format_summary_table(results: dict[str, Any]) -> str:
    """A fixed-width table of the aggregate scores, with the run's counts on top."""
    counts = results["counts"]
    lines = [
        f"rows: {counts['rows']}  ok: {counts['ok']}  errors: {counts['errors']}  "
        f"wall time: {results['run']['wall_time_s']:.1f} s",
        "",
        f"{'score':<36} {'count':>7} {'nan':>6} {'mean':>9} {'min':>9} {'max':>9} {'p50':>9}",
        "-" * 89,
    ]
    for score in results["aggregate_scores"]["scores"]:
        p50 = (score.get("percentiles") or {}).get("p50")
        lines.append(
            f"{score['name']:<36} {score['count']:>7} {score['nan_count']:>6} "
            f"{_number(score['mean'])} {_number(score['min'])} {_number(score['max'])} {_number(p50)}"
        )
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return f"{'-':>9}" if value is None else f"{value:>9.4f}"


def unwrap_pipeline_error(exc: BaseException) -> str | None:
    """The user-facing message (with its hint) of an EvaluatorError, raised here or in a Beam worker.

    Runners re-raise worker exceptions wrapped or re-created with the step name and a
    traceback appended; the original is either in the cause chain or the same type.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, EvaluatorError):
            text = _STEP_ANNOTATION.sub("", str(current))
            return text.split("\nTraceback")[0].rstrip()
        current = current.__cause__ or current.__context__
    return None
