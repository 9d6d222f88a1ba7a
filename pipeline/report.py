"""``python -m pipeline.report DIR...``: write ``report.html`` for a run or a comparison directory.

Every completed run calls :func:`report_after_run`; the compare command calls
:func:`write_comparison_report`. Run by hand, it regenerates the page for runs made before
reports existed, or after a Dataflow job whose driver did not render one.

The files are read here, through Beam's ``FileSystems`` (so ``gs://`` works), and streamed:
``rows/`` Parquet shards go batch by batch through the library's ``RowSampler`` (a bounded,
seeded sample), ``errors/`` and ``flips.jsonl`` line by line; nothing holds the whole run.
The page itself is built by the pure functions of ``beameval.report``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beameval.core.errors import EvaluatorError
from beameval.report import (
    DEFAULT_BUDGET,
    FailureBreakdown,
    Reservoir,
    RowSampler,
    render_comparison_report,
    render_run_report,
)
from beameval.report.compare_page import flip_direction
from beameval.report.leaderboard_page import render_leaderboard_report
from beameval.report.matrix import MatrixRow
from beameval.report.rows import item_of
from pipeline.results import write_file_atomically

__all__ = [
    "COMPARISON_FILE",
    "FLIPS_FILE",
    "REPORT_FILE",
    "main",
    "report_after_run",
    "write_comparison_report",
    "write_leaderboard_report",
    "write_run_report",
]

REPORT_FILE = "report.html"
COMPARISON_FILE = "comparison.json"
FLIPS_FILE = "flips.jsonl"
#: Rows per Arrow batch read from a Parquet shard: bounded memory, few Python calls.
BATCH_ROWS = 16_384
#: Columns never shown on the page (a 64-character hash per row is only bulk).
_HIDDEN_COLUMNS = {"request_hash"}


class ReportError(EvaluatorError):
    """The report could not be built or written (missing or unreadable run files)."""


def _join(directory: str, *parts: str) -> str:
    return FileSystems.join(directory.rstrip("/"), *parts)


def _files(pattern: str) -> list[str]:
    try:
        return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    except Exception:  # noqa: BLE001 - every file system reports "nothing there" its own way
        return []


def _read_json(path: str) -> Any:
    try:
        with FileSystems.open(path) as handle:
            return json.loads(handle.read().decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - missing file, bad JSON, file system errors alike
        raise ReportError(
            f"cannot read {path}: {type(exc).__name__}: {exc}",
            hint="Point the command at a directory written by a completed run (results.json) or "
            "comparison (comparison.json).",
        ) from None


def _lines(pattern: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of every JSON Lines file matching ``pattern``; unreadable lines are skipped."""
    for path in _files(pattern):
        with FileSystems.open(path) as handle:
            for raw in handle:
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    yield record


def _write_page(path: str, html: str) -> None:
    """Write the page whole (``write_file_atomically``) beside the outputs it shows, never recreating their directory.

    A run directory removed before its report is written stays removed: a folder holding only
    report.html would look like a run.
    """
    directory = os.path.dirname(path) or "."
    if "://" not in path and not os.path.isdir(directory):
        raise FileNotFoundError(f"no directory {directory!r} to write {REPORT_FILE} in")
    write_file_atomically(path, html.encode("utf-8"), mime_type="text/html")


def sample_rows(out_dir: str, budget: int = DEFAULT_BUDGET, seed: int = 0) -> tuple[list[dict[str, Any]], Any, Any]:
    """Stream ``rows/`` and ``errors/`` of a run: ``(rows, SampleInfo, FailureBreakdown)``.

    Failed rows kept in the sample are tagged with their failure group (``failure``),
    ``phase`` and ``metric`` from ``errors/``.
    """
    sampler = RowSampler(budget=budget, seed=seed)
    for path in _files(_join(out_dir, "rows", "*.parquet")):
        with FileSystems.open(path) as handle:
            shard = pq.ParquetFile(handle)
            columns = [c for c in shard.schema_arrow.names if c not in _HIDDEN_COLUMNS]
            # One row group at a time: ``iter_batches`` buffers ahead (about 240 MiB more at 10^6 rows).
            for group in range(shard.num_row_groups):
                for batch in shard.read_row_group(group, columns=columns).to_batches(max_chunksize=BATCH_ROWS):
                    sampler.add_batch(batch)
    rows, info = sampler.result()
    failed = {(r.get("row_index"), r.get("sample_index") or 0): r for r in rows if r.get("status") == "error"}
    breakdown = FailureBreakdown()
    for record in _lines(_join(out_dir, "errors", "*.jsonl")):
        group = breakdown.add(record)
        row = failed.get((record.get("row_index"), record.get("sample_index") or 0))
        if row is not None:
            row.update(failure=group, phase=record.get("phase"), metric=record.get("metric"))
    if not breakdown.total and failed:  # errors/ missing (an older or partial copy): count what is here
        breakdown = FailureBreakdown.from_rows(rows)
    return rows, info, breakdown


def write_run_report(out_dir: str, results: dict[str, Any] | None = None, budget: int = DEFAULT_BUDGET) -> str:
    """Write ``OUT_DIR/report.html`` from ``results.json`` and a bounded sample of ``rows/``.

    Args:
        out_dir: the run's output directory (local path or Beam file-system URL).
        results: the results document, when the caller has it; else ``results.json`` is read.
        budget: rows embedded in the page at most.

    Returns:
        The path of the page.

    Raises:
        ReportError: ``results.json`` is missing or unreadable.
    """
    if results is None:
        results = _read_json(_join(out_dir, "results.json"))
    rows, info, failures = sample_rows(out_dir, budget)
    path = _join(out_dir, REPORT_FILE)
    _write_page(path, render_run_report(results, rows, sample=info, failures=failures))
    return path


def write_leaderboard_report(
    out_dir: str,
    results: dict[str, Any],
    comparison: dict[str, Any] | None,
    directories: dict[str, str],
    budget: int = DEFAULT_BUDGET,
) -> str:
    """Write a multi-target run's ``OUT_DIR/report.html``: the leaderboard, comparisons and the prompt x model matrix.

    The matrix's rows are the first target's bounded sample (failed rows first, then a
    seeded sample: ``sample_rows``) and every other target's rows with the same keys, read
    shard by shard and filtered on ``row_index``, so memory stays bounded at any run size.

    Args:
        out_dir: the run's OUT_DIR.
        results: its top-level results document.
        comparison: its comparison.json (None with one target).
        directories: each target's run directory, the first target first.
        budget: rows in the matrix at most.

    Returns:
        The path of the page.
    """
    (first, first_dir), *others = directories.items()
    rows, info, _ = sample_rows(first_dir, budget)
    matrix = {
        (int(r["row_index"]), int(r.get("sample_index") or 0)): MatrixRow(
            int(r["row_index"]), int(r.get("sample_index") or 0), item_of(r), {first: r}
        )
        for r in rows
    }
    wanted = sorted({key[0] for key in matrix})
    for name, directory in others:
        for record in _rows_with(directory, wanted):
            line = matrix.get((int(record["row_index"]), int(record.get("sample_index") or 0)))
            if line is not None:
                line.answers[name] = record
    path = _join(out_dir, REPORT_FILE)
    ordered = [matrix[key] for key in sorted(matrix)]
    _write_page(path, render_leaderboard_report(results, comparison, ordered, info.total_rows))
    return path


def _rows_with(out_dir: str, row_indexes: list[int]) -> Iterator[dict[str, Any]]:
    """The ``rows/`` records of ``out_dir`` whose ``row_index`` is one of ``row_indexes``, one row group at a time."""
    wanted = pa.array(row_indexes, type=pa.int64())
    for path in _files(_join(out_dir, "rows", "*.parquet")):
        with FileSystems.open(path) as handle:
            shard = pq.ParquetFile(handle)
            columns = [c for c in shard.schema_arrow.names if c not in _HIDDEN_COLUMNS]
            for group in range(shard.num_row_groups):
                table = shard.read_row_group(group, columns=columns)
                kept = table.filter(pc.is_in(table.column("row_index").cast(pa.int64()), value_set=wanted))
                yield from kept.to_pylist()


def write_comparison_report(cmp_dir: str, budget: int = DEFAULT_BUDGET, seed: int = 0) -> str:
    """Write ``CMP_DIR/report.html`` from ``comparison.json`` and ``flips.jsonl`` (every regression first).

    Args:
        cmp_dir: the comparison's output directory.
        budget: flipped rows embedded at most; regressed ones are kept before improved ones.
        seed: fixes which flips are kept when there are more than ``budget``.

    Returns:
        The path of the page.

    Raises:
        ReportError: ``comparison.json`` is missing or unreadable.
    """
    comparison = _read_json(_join(cmp_dir, COMPARISON_FILE))
    rng = random.Random(seed)
    regressed, others = Reservoir(budget, rng), Reservoir(budget, rng)
    for flip in _lines(_join(cmp_dir, FLIPS_FILE)):
        tier = regressed if flip_direction(flip) != "improved" else others
        for _, slot in tier.offer(1):
            tier.put(slot, flip)
    kept = regressed.items[:budget]
    kept += others.items[: budget - len(kept)]
    total = regressed.seen + others.seen
    path = _join(cmp_dir, REPORT_FILE)
    _write_page(path, render_comparison_report(comparison, kept, total_flips=total))
    return path


def report_after_run(out_dir: str, results: dict[str, Any]) -> str | None:
    """Write the run's report; a failure here is a warning on stderr, never a failed run.

    The run's outputs (``results.json`` first) are complete before this is called, so a
    page that cannot be written costs nothing that ``python -m pipeline.report`` cannot redo.
    """
    try:
        return write_run_report(out_dir, results)
    except Exception as exc:  # noqa: BLE001 - the report is a view; the run has already succeeded
        print(
            f"warning: the run completed but {REPORT_FILE} could not be written ({type(exc).__name__}: {exc}); "
            f"run 'python -m pipeline.report {out_dir}' to try again.",
            file=sys.stderr,
        )
        return None


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: one report per directory; returns the exit code (2 on any failure)."""
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.report",
        description="Write report.html in a run directory (results.json + rows/) or a comparison directory "
        "(comparison.json + flips.jsonl).",
    )
    parser.add_argument("directories", nargs="+", metavar="DIR", help="OUT_DIR of a run, or CMP_DIR of a comparison")
    parser.add_argument("--rows", type=int, default=DEFAULT_BUDGET, help="rows embedded in the page at most")
    args = parser.parse_args(argv)
    for directory in args.directories:
        try:
            if _files(_join(directory, COMPARISON_FILE)):
                path = write_comparison_report(directory, budget=max(0, args.rows))
            else:
                path = write_run_report(directory, budget=max(0, args.rows))
        except EvaluatorError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
