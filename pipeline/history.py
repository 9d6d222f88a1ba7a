"""Run history: append one record per completed run, read them back, and ``python -m pipeline.history DIR``.

Concurrency design. Locally every run appends its record to ``DIR/runs.jsonl`` with one
``write()`` on a descriptor opened with ``O_APPEND``: the kernel moves to the end of the file
and writes the whole buffer under the inode lock, so two runs finishing together give two
whole lines in some order, never interleaved bytes (true for local file systems; not
promised over NFS). Object stores (``gs://``, ``s3://``) have no append: there each run
writes its own object ``DIR/runs/<finished_at>-<run_id>.json``, which appears atomically
when its upload completes. Readers merge both forms, so a history may hold either. (The
object-store path cannot be exercised in this project's tests: they have no network.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beameval.compare.runs import FORMATS, format_runs, history_record
from beameval.core.errors import EvaluatorError, OutputError

__all__ = ["RUNS_DIR", "RUNS_FILE", "append_run", "history_exists", "main", "read_runs"]

RUNS_FILE = "runs.jsonl"
RUNS_DIR = "runs"


def append_run(history: str, results: dict[str, Any], output: str) -> str:
    """Record a completed run in the history; return where the record went.

    Args:
        history: the history directory (local path or Beam file-system URL).
        results: the run's results document.
        output: the run's output directory.

    Raises:
        OutputError: the history cannot be written.
    """
    record = history_record(results, output)
    data = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    try:
        if "://" in history:
            stamp = str(record.get("finished_at") or "").replace(":", "").replace("-", "")
            path = FileSystems.join(history, RUNS_DIR, f"{stamp}-{record.get('run_id')}.json")
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
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise OutputError(
            f"the run completed and results.json was written, but it could not be recorded in the history "
            f"{history!r}: {exc}. Check that the location is writable; the run itself need not be repeated."
        ) from None


def read_runs(history: str) -> tuple[list[dict[str, Any]], int]:
    """Every record in the history, oldest first, and how many unreadable lines were skipped.

    Raises:
        EvaluatorError: the history location holds neither ``runs.jsonl`` nor ``runs/``.
    """
    records: list[dict[str, Any]] = []
    skipped = 0
    texts: list[str] = []
    try:
        main_file = FileSystems.join(history, RUNS_FILE)
        if FileSystems.exists(main_file):
            texts += _read(main_file).splitlines()
        objects = FileSystems.match([FileSystems.join(history, RUNS_DIR, "*.json")])[0].metadata_list
        texts += [_read(m.path) for m in sorted(objects, key=lambda m: m.path)]
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise EvaluatorError(f"cannot read the run history {history!r}: {exc}.") from None
    for text in texts:
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except ValueError:
            skipped += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    # A stable sort keeps file order for equal times.
    records.sort(key=lambda r: str(r.get("finished_at") or ""))
    return records, skipped


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
        records, skipped = read_runs(args.history)
    except EvaluatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_runs(records, args.format))
    if skipped:
        print(f"note: skipped {skipped} unreadable history line(s) in {args.history!r}.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
