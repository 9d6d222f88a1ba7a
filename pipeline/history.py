"""Run history: append one record per completed run, read them back, and ``python -m pipeline.history DIR``.

Concurrency design. Locally every run appends its record to ``DIR/runs.jsonl`` with one
``write()`` on a descriptor opened with ``O_APPEND``: the kernel moves to the end of the file
and writes the whole buffer under the inode lock, so two runs finishing together give two
whole lines in some order, never interleaved bytes (true for local file systems; not
promised over NFS). Object stores (``gs://``, ``s3://``) have no append: there each run
writes its own object ``DIR/runs/<finished_at>-<run_id>.json``, which appears atomically
when its upload completes. Readers merge both forms, so a history may hold either. (The
object-store path cannot be exercised in this project's tests: they have no network.)

``pipeline.compare --history DIR`` appends its verdict the same way (``append_verdict``),
so ``--baseline latest`` can skip runs that failed their gate. Outputs are recorded as
absolute paths (or URLs), so a history read from another working directory still finds them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beameval.compare.runs import FORMATS, format_runs, history_record, is_verdict_record, verdict_record
from beameval.core.errors import EvaluatorError, OutputError

__all__ = [
    "RUNS_DIR",
    "RUNS_FILE",
    "append_run",
    "append_verdict",
    "history_exists",
    "load_history",
    "main",
    "read_runs",
]

RUNS_FILE = "runs.jsonl"
RUNS_DIR = "runs"


def append_run(history: str, results: dict[str, Any], output: str) -> str:
    """Record a completed (or ``--decide``-stopped) run in the history; return where the record went.

    Args:
        history: the history directory (local path or Beam file-system URL).
        results: the run's results document.
        output: the run's output directory (recorded absolute).

    Raises:
        OutputError: the history cannot be written.
    """
    record = history_record(results, output if "://" in output else os.path.abspath(output))
    if results.get("stopped"):  # a run stopped by --decide (or a budget): its status keeps it from being a baseline
        record["stopped"] = results["stopped"]
    try:
        where = _append(history, record, str(record.get("finished_at") or ""), str(record.get("run_id")))
        if record.get("status") == "completed":
            _inherit_decision(history, record)
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise OutputError(
            f"the run completed and results.json was written, but it could not be recorded in the history "
            f"{history!r}: {exc}. Check that the location is writable; the run itself need not be repeated."
        ) from None
    return where


def _inherit_decision(history: str, record: dict[str, Any]) -> None:
    """A run that ``--resume`` completed after ``--decide`` stopped it keeps that decision's verdict.

    Its run id is new, so without this it would count as never compared, hence accepted:
    a NO-GO decided on part of the rows would become ``latest`` once the rest was evaluated.
    Only when the decided run is the last one recorded for the same output directory.
    """
    records, _ = read_runs(history)
    earlier = [
        r
        for r in records
        if not is_verdict_record(r) and r.get("output") == record["output"] and r.get("run_id") != record["run_id"]
    ]
    if not earlier or earlier[-1].get("stopped") != "decided":
        return
    decided = earlier[-1].get("run_id")
    verdicts = [r for r in records if is_verdict_record(r) and r.get("run_id") == decided]
    if verdicts:
        last = verdicts[-1]
        stamp = str(record.get("finished_at") or last.get("compared_at") or "")
        inherited = verdict_record(record["run_id"], last.get("verdict"), last.get("baseline_run_id"), stamp)
        _append(history, inherited, stamp, f"{record['run_id']}-verdict")


def append_verdict(
    history: str, run_id: str | None, verdict: str | None, baseline_run_id: str | None, compared_at: str
) -> str:
    """Record a comparison's verdict on ``run_id`` (None verdict and baseline: it had no baseline).

    Raises:
        OutputError: the history cannot be written.
    """
    record = verdict_record(run_id, verdict, baseline_run_id, compared_at)
    try:
        return _append(history, record, compared_at, f"{run_id}-verdict")
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise OutputError(
            f"the comparison was written, but its verdict could not be recorded in the history {history!r}: {exc}. "
            "Check that the location is writable; until it is recorded, --baseline latest cannot tell whether "
            "this run was accepted."
        ) from None


def _append(history: str, record: dict[str, Any], stamp: str, name: str) -> str:
    """Append one record: one O_APPEND write locally, one new object on an object store."""
    data = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    if "://" in history:
        stamp = stamp.replace(":", "").replace("-", "")
        path = FileSystems.join(history, RUNS_DIR, f"{stamp}-{name}.json")
        with FileSystems.create(path) as handle:
            handle.write(data)
        return path
    os.makedirs(history, exist_ok=True)
    path = os.path.join(history, RUNS_FILE)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(descriptor, data)  # one write: the line lands whole (see the module docstring)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    if written != len(data):
        raise OSError(f"short write ({written} of {len(data)} bytes; is the disk full?)")
    return path


def read_runs(history: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record in the history (runs oldest first, verdicts in file order) and where unreadable lines are.

    Returns:
        ``(records, bad)``: ``bad`` names each line that is not a JSON object (``path line N``).

    Raises:
        EvaluatorError: the history location cannot be read.
    """
    records: list[dict[str, Any]] = []
    bad: list[str] = []
    texts: list[tuple[str, str]] = []
    try:
        main_file = FileSystems.join(history, RUNS_FILE)
        if FileSystems.exists(main_file):
            texts += [(f"{main_file} line {n}", t) for n, t in enumerate(_read(main_file).splitlines(), start=1)]
        objects = FileSystems.match([FileSystems.join(history, RUNS_DIR, "*.json")])[0].metadata_list
        texts += [(m.path, _read(m.path)) for m in sorted(objects, key=lambda m: m.path)]
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise EvaluatorError(f"cannot read the run history {history!r}: {exc}.") from None
    for where, text in texts:
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except ValueError:
            bad.append(where)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad.append(where)
    # A stable sort keeps file order for equal times (verdict records have no finished_at: they keep theirs).
    records.sort(key=lambda r: str(r.get("finished_at") or ""))
    return records, bad


def load_history(history: str) -> list[dict[str, Any]]:
    """The records of a history a comparison depends on: any doubt about it is an error, never "no baseline".

    Raises:
        EvaluatorError: the path does not exist, holds no history, or has unreadable lines.
    """
    try:
        exists = FileSystems.exists(history) or FileSystems.exists(FileSystems.join(history, RUNS_FILE))
    except Exception as exc:  # noqa: BLE001 - an unknown scheme or an unreachable store
        raise EvaluatorError(f"cannot read the run history {history!r}: {exc}.") from None
    if "://" not in history and not exists:
        raise EvaluatorError(
            f"--history {history!r} does not exist. Pass the directory that pipeline.run --history wrote "
            f"(it holds {RUNS_FILE}); a mistyped path would otherwise mean the gate never has a baseline."
        )
    if not history_exists(history):
        raise EvaluatorError(
            f"--history {history!r} is not a run history: it has no {RUNS_FILE} or {RUNS_DIR}/*.json. Pass the "
            "directory that pipeline.run --history wrote."
        )
    records, bad = read_runs(history)
    if bad:
        raise EvaluatorError(
            f"the run history {history!r} has {len(bad)} unreadable record(s), the first at {bad[0]}: each line "
            f"of {RUNS_FILE} must be one JSON object. Repair or remove the line(s); a comparison will not guess "
            "which run was accepted from a damaged history."
        )
    return records


def _read(path: str) -> str:
    with FileSystems.open(path) as handle:
        return handle.read().decode("utf-8", "replace")


def history_exists(history: str) -> bool:
    """Whether ``history`` holds any record file."""
    try:
        if FileSystems.exists(FileSystems.join(history, RUNS_FILE)):
            return True
        return bool(FileSystems.match([FileSystems.join(history, RUNS_DIR, "*.json")])[0].metadata_list)
    except Exception:  # noqa: BLE001 - an unreachable location holds no history we can use
        return False


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.history DIR [--format table|csv|json]``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.history", description="Print the runs recorded with --history DIR."
    )
    parser.add_argument("history", help="the history directory (local path or Beam file-system URL)")
    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not history_exists(args.history):
        print(
            f"error: no run history at {args.history!r}: it has no {RUNS_FILE} or {RUNS_DIR}/. Runs are recorded "
            f"there by python -m pipeline.run ... --history {args.history}.",
            file=sys.stderr,
        )
        return 2
    try:
        records, bad = read_runs(args.history)
    except EvaluatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_runs(records, args.format))
    if bad:
        print(f"note: skipped {len(bad)} unreadable history line(s), the first at {bad[0]}.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
