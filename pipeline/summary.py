"""What the command line prints after a run: the summary table, and user errors dug out of Beam's wrappers."""

from __future__ import annotations

import re
from typing import Any

from beameval.core.errors import EvaluatorError

__all__ = ["format_summary_table", "unexpected_error", "unwrap_pipeline_error"]

#: What Beam appends to an exception re-raised from a step.
_STEP_ANNOTATION = re.compile(r" \[while running '[^']*'\]")


def format_summary_table(results: dict[str, Any]) -> str:
    """A table of the aggregate scores (mean, interval, n), the run's counts on top, groups below.

    The name column is as wide as the longest score name, so long names (``llm-judge_2.helpfulness``)
    never push the numbers out of line.
    """
    counts = results["counts"]
    scores = results["aggregate_scores"]["scores"]
    width = max([len("score"), *(len(score["name"]) for score in scores)])
    samples = f"  samples: {counts['samples']}" if counts.get("samples", counts["rows"]) != counts["rows"] else ""
    skipped = f"  skipped: {counts['skipped']}" if counts.get("skipped") else ""
    cost = (results.get("usage") or {}).get("cost_usd")
    spent = f"  cost: ${cost['total']:.4f}" if cost else ""
    lines = [
        f"rows: {counts['rows']}  ok: {counts['ok']}  errors: {counts['errors']}{skipped}{samples}  "
        f"wall time: {results['run']['wall_time_s']:.1f} s{spent}",
        "",
        _score_header(width),
        "-" * (width + 72),
        *(_score_line(score, score["name"], width) for score in scores),
    ]
    groups = results.get("groups") or []
    if groups:
        labels = [f"{group['by']}={group['value']}" for group in groups[:MAX_GROUP_LINES]]
        group_width = max(len("group"), *(len(label) for label in labels))
        lines += ["", f"{'group':<{group_width}} {_score_header(width)}"]
        for label, group in zip(labels, groups, strict=False):
            for score in group["scores"]:
                lines.append(f"{label:<{group_width}} " + _score_line(score, score["name"], width))
        if len(groups) > MAX_GROUP_LINES:
            lines.append(f"... {len(groups) - MAX_GROUP_LINES} more groups in results.json")
    return "\n".join(lines)


MAX_GROUP_LINES = 20


def _score_header(width: int) -> str:
    return f"{'score':<{width}} {'count':>7} {'nan':>6} {'mean':>9} {'95% interval':>21} {'min':>9} {'max':>9}"


def _score_line(score: dict[str, Any], name: str, width: int) -> str:
    low, high = score.get("ci_low"), score.get("ci_high")
    interval = "-" if low is None or high is None else f"[{low:.4f}, {high:.4f}]"
    level = score.get("confidence_level")
    if level is not None and level != 0.95 and interval != "-":
        interval = f"{interval} {level:.0%}"
    return (
        f"{name:<{width}} {score['count']:>7} {score['nan_count']:>6} {_number(score['mean'])} "
        f"{interval:>21} {_number(score['min'])} {_number(score['max'])}"
    )


def _number(value: float | None) -> str:
    return f"{'-':>9}" if value is None else f"{value:>9.4f}"


def unexpected_error(exc: BaseException, what: str) -> str:
    """The one paragraph for an error nobody anticipated (a bug, or a cause outside the config)."""
    first_line = str(exc).splitlines()[0] if str(exc) else ""
    return (
        f"error: the {what} stopped unexpectedly: {type(exc).__name__}: {first_line}. Rerun with --debug for the "
        "full traceback and report it if the cause is not in your config or data."
    )


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
