"""The runs a comparison reads: one side's results.json, the baseline chosen from the history, the verdict recorded.

``pipeline.compare`` and ``pipeline.targets_compare`` both pair two finished runs; what a run
must be to be compared (completed, or stopped at its budget), which run ``--baseline
latest|previous`` means, and what the comparison says about each side are decided here once.
Nothing in this module runs Beam: it reads ``results.json`` through Beam's file systems so a
side may live on any of them.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beameval.compare.runs import BASELINE_CHOICES, baseline_run
from beameval.core.errors import ConfigError, EvaluatorError
from pipeline.history import append_verdict
from pipeline.results import RESULTS_FILE, read_json

__all__ = [
    "NoBaseline",
    "Run",
    "check_recorded_run",
    "config_group_by",
    "config_level",
    "load_run",
    "record_count",
    "record_verdict",
    "resolve_baseline",
    "run_id",
    "run_summary",
    "score_ranges",
]

#: What a run that stopped at its budget says in results.json (CONTRACT "Budgets").
_BUDGET = "budget"


class NoBaseline(Exception):
    """``--baseline latest`` found no earlier run to compare with: not an error (exit 0)."""


@dataclass
class Run:
    """One side: its directory, its results.json, and why it stopped early (None when it completed)."""

    directory: str
    results: dict[str, Any]
    stopped: str | None


def load_run(directory: str, side: str) -> Run:
    """A side's results.json; refused (naming the side) unless the run completed or stopped at its budget.

    A run stopped at its budget is compared (its rows are an evaluation of what it reached) and
    the gate is told so; any other early stop is refused, because its scores are not an evaluation.

    Raises:
        EvaluatorError: the directory is unreadable, has no results.json, or the run did not complete.
    """
    path = FileSystems.join(directory, RESULTS_FILE)
    try:
        exists = FileSystems.exists(path)
    except Exception as exc:  # noqa: BLE001 - an unknown scheme or an unreachable store
        raise EvaluatorError(f"cannot read the {side} run {directory!r}: {exc}.") from None
    if not exists:
        raise EvaluatorError(
            f"the {side} run {directory!r} has no {RESULTS_FILE}: it is not the output directory of a completed "
            "run (a run writes results.json last, only when it completes). Point --"
            f"{side} at a completed run's --output."
        )
    try:
        results = dict(read_json(path))
    except ValueError as exc:
        raise EvaluatorError(f"the {side} run's {path!r} is not valid JSON ({exc}); rerun that evaluation.") from None
    stopped = results.get("stopped") if results.get("complete") is False else None
    if stopped == _BUDGET:
        return Run(directory, results, _BUDGET)
    status = results.get("status")
    if status != "completed" or results.get("complete") is False:
        why = f"its status is {status!r}" if status != "completed" else f"it stopped early ({stopped!r})"
        raise EvaluatorError(
            f"the {side} run {directory!r} did not complete: {why} in {path} (for example more rows failed than "
            "params.max_error_rate allows). Its scores are not an evaluation; fix the cause and rerun it, or pass "
            f"another --{side}."
        )
    return Run(directory, results, None)


def resolve_baseline(baseline: str, records: list[dict[str, Any]] | None, history: str | None, candidate: Run) -> str:
    """The baseline's directory: ``--baseline`` itself, or the history's run that ``latest``/``previous`` names.

    Raises:
        ConfigError: ``latest``/``previous`` without ``--history``.
        EvaluatorError: the candidate has no eval_hash to match a history record by.
        NoBaseline: the history holds no other run with the candidate's eval_hash.
    """
    if baseline not in BASELINE_CHOICES:
        return baseline
    if records is None:
        raise ConfigError(f"--baseline {baseline} needs --history DIR: the run history to pick the baseline from.")
    provenance = candidate.results.get("provenance") or {}
    eval_hash = provenance.get("eval_hash")
    if not eval_hash:
        raise EvaluatorError(
            f"the candidate run {candidate.directory!r} has no provenance.eval_hash in its results.json (it "
            "predates provenance); rerun it, or name the baseline directory with --baseline OUT_A."
        )
    chosen = baseline_run(records, baseline, eval_hash, provenance.get("run_id"), _absolute(candidate.directory))
    if chosen is None:
        accepted = " accepted" if baseline == "latest" else ""
        raise NoBaseline(
            f"no baseline: the history {history!r} holds no other{accepted} completed run with the candidate's "
            f"eval_hash {eval_hash[:12]} ({len(records)} records), so there is nothing to compare with yet. The "
            "candidate becomes the baseline of the next comparison once it is recorded with --history."
        )
    return str(chosen["output"])


def _absolute(directory: str) -> str:
    """The directory as the history records it: local paths absolute, URLs as given."""
    return directory if "://" in directory else os.path.abspath(directory)


def check_recorded_run(baseline: Run, records: list[dict[str, Any]], history: str | None) -> None:
    """The run found at a history record's output must be the run recorded there (not a later one written over it).

    Raises:
        EvaluatorError: the directory now holds another run than the one the history recorded.
    """
    recorded = [r.get("run_id") for r in records if r.get("output") == baseline.directory]
    found = run_id(baseline)
    if recorded and found not in recorded:
        raise EvaluatorError(
            f"the history {history!r} records run {recorded[-1]} at {baseline.directory!r}, but the run there now "
            f"is {found}: the directory was written over. Compare with an explicit --baseline, or record runs "
            "in distinct output directories (e.g. --output runs/{run_date})."
        )


def record_verdict(history: str, candidate: Run, verdict: str | None, baseline_run_id: str | None) -> None:
    """Append the candidate's verdict (None: there was no baseline) to the history, stamped now in UTC."""
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    append_verdict(history, run_id(candidate), verdict, baseline_run_id, stamp)


def run_id(run: Run) -> str | None:
    """The run's provenance.run_id (None for a run that predates provenance)."""
    return (run.results.get("provenance") or {}).get("run_id")


def config_group_by(run: Run) -> list[str]:
    """The run's statistics.group_by: the fields a comparison gates per group when ``--group_by`` is not given."""
    return list(((run.results.get("config") or {}).get("statistics") or {}).get("group_by") or [])


def config_level(run: Run) -> float | None:
    """The run's statistics.confidence_level, the gate's level unless the policy sets one."""
    level = ((run.results.get("config") or {}).get("statistics") or {}).get("confidence_level")
    return None if level is None else float(level)


def score_ranges(results: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Each score's known range, as the run recorded it in its aggregate scores (the gate bounds its intervals)."""
    found = {}
    for score in (results.get("aggregate_scores") or {}).get("scores", []):
        bounds = score.get("range")
        if isinstance(bounds, list) and len(bounds) == 2:
            found[score["name"]] = (float(bounds[0]), float(bounds[1]))
    return found


def record_count(results: dict[str, Any]) -> int:
    """How many records the run's rows/ holds (samples with repeats), for sizing the join."""
    counts = results.get("counts") or {}
    return int(counts.get("samples") or counts.get("rows") or 0)


def run_summary(run: Run) -> dict[str, Any]:
    """What ``comparison.json`` says about one side: where it is, which run, which model, whether it stopped."""
    results, directory = run.results, run.directory
    provenance = results.get("provenance") or {}
    target = (results.get("config") or {}).get("target") or {}
    return {
        "output": directory,
        "run_id": provenance.get("run_id"),
        "finished_at": provenance.get("finished_at"),
        "eval_hash": provenance.get("eval_hash"),
        "target_model": (target.get("model") or {}).get("name"),
        "models_seen": provenance.get("models_seen"),
        "stopped": run.stopped,
    }
