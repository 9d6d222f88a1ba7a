"""Run history: run and verdict records, the ``latest`` / ``previous`` baseline rules, and the history table.

The history holds two kinds of record: one per completed run (``history_record``, with its
``output``) and one per comparison gated with ``--history`` (``verdict_record``:
``{run_id, verdict, baseline_run_id, compared_at}``). ``latest`` is the most recent run
that was accepted, and accepted means gated: its own most recent comparison was GO, or it
is the first completed run of its ``eval_hash`` in the history (there was nothing to gate
it against). A run whose comparison never ran (a crashed compare task) is not accepted, so
a regression lasting two nights is compared with the last good night both times, and a run
that failed its gate never becomes the baseline by being recent; ``previous`` is the most
recent run whatever its verdict.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from typing import Any

__all__ = [
    "BASELINE_CHOICES",
    "FORMATS",
    "baseline_run",
    "format_runs",
    "history_record",
    "is_verdict_record",
    "latest_run",
    "verdict_record",
]

#: ``--baseline`` values resolved from the history.
BASELINE_CHOICES = ("latest", "previous")

FORMATS = ("table", "csv", "json")


def history_record(results: dict[str, Any], output: str) -> dict[str, Any]:
    """The history line (``runs.jsonl``) for a completed run's ``results.json``.

    Args:
        results: the results document (with its ``provenance``).
        output: the run's output directory, as given.

    Returns:
        ``{run_id, started_at, finished_at, output, config_hash, dataset_fingerprint, eval_hash,
        target_model, models_seen, counts, scores: [{name, mean, ci_low, ci_high}]}``.
    """
    provenance = results.get("provenance") or {}
    target = (results.get("config") or {}).get("target") or {}
    model = target.get("model") or {}
    agent = target.get("agent") or {}
    return {
        "status": results.get("status", "completed"),
        "run_id": provenance.get("run_id"),
        "started_at": provenance.get("started_at"),
        "finished_at": provenance.get("finished_at"),
        "output": output,
        "config_hash": provenance.get("config_hash"),
        "dataset_fingerprint": (provenance.get("dataset") or {}).get("fingerprint"),
        "eval_hash": provenance.get("eval_hash"),
        "target_model": model.get("name") or (f"agent {agent['url']}" if agent.get("url") else None),
        "models_seen": provenance.get("models_seen") or [],
        "counts": results.get("counts"),
        "scores": [
            {"name": s["name"], "mean": s.get("mean"), "ci_low": s.get("ci_low"), "ci_high": s.get("ci_high")}
            for s in (results.get("aggregate_scores") or {}).get("scores", [])
        ],
    }


def verdict_record(
    run_id: str | None, verdict: str | None, baseline_run_id: str | None, compared_at: str
) -> dict[str, Any]:
    """The history line of one gated comparison (``verdict`` and ``baseline_run_id`` None: there was no baseline)."""
    return {"run_id": run_id, "verdict": verdict, "baseline_run_id": baseline_run_id, "compared_at": compared_at}


def is_verdict_record(record: dict[str, Any]) -> bool:
    """Whether a history record is a comparison's verdict (else it is a run's)."""
    return "compared_at" in record and "output" not in record


def baseline_run(
    records: Iterable[dict[str, Any]],
    choice: str,
    eval_hash: str,
    exclude_run_id: str | None,
    exclude_output: str | None,
) -> dict[str, Any] | None:
    """The run ``--baseline latest`` or ``--baseline previous`` names (see the module docstring).

    Args:
        records: history records of both kinds, in file order.
        choice: ``latest`` (the last accepted run) or ``previous`` (the last run).
        eval_hash: the candidate's eval hash.
        exclude_run_id: the candidate's run id.
        exclude_output: the candidate's output directory.

    Returns:
        The chosen run record, or None when the history has no such run.
    """
    items = list(records)
    verdicts: dict[Any, dict[str, Any]] = {}
    for record in items:
        if is_verdict_record(record) and str(record.get("compared_at") or "") >= str(
            (verdicts.get(record.get("run_id")) or {}).get("compared_at") or ""
        ):
            verdicts[record.get("run_id")] = record
    runs = [record for record in items if not is_verdict_record(record)]
    if choice == "latest":
        first = _first_runs(runs)
        runs = [
            record
            for record in runs
            if record.get("run_id") in first or (verdicts.get(record.get("run_id")) or {}).get("verdict") == "GO"
        ]
    return latest_run(runs, eval_hash, exclude_run_id, exclude_output)


def _first_runs(runs: list[dict[str, Any]]) -> set[Any]:
    """The run id of each ``eval_hash``'s first completed run: accepted with nothing to be gated against."""
    first: dict[Any, dict[str, Any]] = {}
    for record in runs:
        if record.get("status", "completed") != "completed":
            continue
        earliest = first.get(record.get("eval_hash"))
        if earliest is None or str(record.get("finished_at") or "") < str(earliest.get("finished_at") or ""):
            first[record.get("eval_hash")] = record
    return {record.get("run_id") for record in first.values()}


def latest_run(
    records: Iterable[dict[str, Any]], eval_hash: str, exclude_run_id: str | None, exclude_output: str | None
) -> dict[str, Any] | None:
    """The most recent completed run with ``eval_hash`` that is not the candidate itself.

    Args:
        records: run records, oldest first (ties on ``finished_at`` go to the later record).
        eval_hash: the candidate's eval hash.
        exclude_run_id: the candidate's run id.
        exclude_output: the candidate's output directory (a rerun into it is the candidate too).

    Returns:
        The chosen record, or None when the history has no such run.
    """
    best: dict[str, Any] | None = None
    for record in records:
        if is_verdict_record(record):
            continue
        if record.get("status", "completed") != "completed" or record.get("eval_hash") != eval_hash:
            continue
        if record.get("run_id") == exclude_run_id or _same_dir(record.get("output"), exclude_output):
            continue
        if best is None or str(record.get("finished_at") or "") >= str(best.get("finished_at") or ""):
            best = record
    return best


def _same_dir(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.rstrip("/") == b.rstrip("/")


def format_runs(records: list[dict[str, Any]], fmt: str) -> str:
    """The history as a fixed-width table, CSV (one column per score statistic) or JSON.

    Args:
        records: history records, oldest first.
        fmt: ``table``, ``csv`` or ``json``.

    Returns:
        The text to print.
    """
    if fmt == "json":
        return json.dumps(records, indent=2, ensure_ascii=False)
    verdicts = {r.get("run_id"): r.get("verdict") or "no baseline" for r in records if is_verdict_record(r)}
    records = [record for record in records if not is_verdict_record(record)]
    names: list[str] = []
    for record in records:
        names += [s["name"] for s in record.get("scores", []) if s["name"] not in names]
    if fmt == "csv":
        return _csv(records, names, verdicts)
    header = ["finished_at", "run_id", "model", "rows", "errors", "eval_hash", "verdict", *names]
    lines = [header]
    for record in records:
        scores = {s["name"]: s for s in record.get("scores", [])}
        counts = record.get("counts") or {}
        lines.append(
            [
                str(record.get("finished_at") or "-"),
                str(record.get("run_id") or "-")[:12],
                str(record.get("target_model") or "-"),
                str(counts.get("rows", "-")),
                str(counts.get("errors", "-")),
                str(record.get("eval_hash") or "-")[:12],
                str(verdicts.get(record.get("run_id")) or "-"),
                *(_cell(scores.get(name)) for name in names),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rows = ("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines)
    return "\n".join(row.rstrip() for row in rows)


def _cell(score: dict[str, Any] | None) -> str:
    if score is None or score.get("mean") is None:
        return "-"
    if score.get("ci_low") is None or score.get("ci_high") is None:
        return f"{score['mean']:.4f}"
    return f"{score['mean']:.4f} [{score['ci_low']:.4f}, {score['ci_high']:.4f}]"


def _csv(records: list[dict[str, Any]], names: list[str], verdicts: dict[Any, str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    fixed = ["run_id", "started_at", "finished_at", "output", "target_model", "eval_hash", "config_hash"]
    writer.writerow(
        [*fixed, "dataset_fingerprint", "rows", "ok", "errors", "verdict", *(f"{n}.{s}" for n in names for s in _STATS)]
    )
    for record in records:
        counts = record.get("counts") or {}
        scores = {s["name"]: s for s in record.get("scores", [])}
        writer.writerow(
            [
                *(record.get(field) for field in fixed),
                record.get("dataset_fingerprint"),
                counts.get("rows"),
                counts.get("ok"),
                counts.get("errors"),
                verdicts.get(record.get("run_id")),
                *((scores.get(n) or {}).get(s) for n in names for s in _STATS),
            ]
        )
    return buffer.getvalue().rstrip("\n")


_STATS = ("mean", "ci_low", "ci_high")
