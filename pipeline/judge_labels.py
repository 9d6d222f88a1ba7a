"""``beameval judge-labels``: sample rows of a finished run for a person to label, and write the labels file.

The sample is stratified by one judge score (``beameval.judges.sampling``), so every level
the judge used is represented; the file has one record per chosen row with the row's key,
an empty field per score of that judge for the person to fill in, and what they need to
judge it (``output_text`` and the dataset row as ``item``). The judge's own scores are left
out on purpose: a person who sees them anchors on them. The filled file is what
``calibration.labels`` reads (JSONL, or CSV when the output name ends in ``.csv``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from typing import Any

import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beameval.core.errors import EvaluatorError
from beameval.judges.calibration import MIN_LABELLED
from beameval.judges.sampling import StratifiedSampler
from beameval.judges.trust import judge_score_names
from pipeline.results import RESULTS_FILE, read_json, write_file_atomically

__all__ = ["main", "write_labels_file"]

DEFAULT_ROWS = 2 * MIN_LABELLED  # room for rows a person skips, and still at least MIN_LABELLED labelled


def _rows(out_dir: str, columns: list[str]) -> Any:
    """The run's first samples (``sample_index`` 0) that scored, with ``columns``, shard by shard."""
    pattern = FileSystems.join(out_dir.rstrip("/"), "rows", "*.parquet")
    paths = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    for path in paths:
        with FileSystems.open(path) as handle:
            shard = pq.ParquetFile(handle)
            wanted = [c for c in ["sample_index", "status", *columns] if c in shard.schema_arrow.names]
            for group in range(shard.num_row_groups):
                for row in shard.read_row_group(group, columns=wanted).to_pylist():
                    if (row.get("sample_index") or 0) == 0 and row.get("status") == "ok":
                        yield row


def write_labels_file(
    out_dir: str, output: str, score: str | None = None, rows: int = DEFAULT_ROWS, key: str = "id", seed: int = 0
) -> dict[str, int]:
    """Sample ``rows`` rows of the run at ``out_dir`` stratified by ``score`` and write the file to label.

    Returns:
        Rows written per judge value (as text).

    Raises:
        EvaluatorError: the directory holds no completed run, the run has no such judge score,
            or its rows have no field ``key``.
    """
    try:
        results = read_json(FileSystems.join(out_dir.rstrip("/"), RESULTS_FILE))
    except Exception as exc:  # noqa: BLE001 - every file system says "not there" its own way
        raise EvaluatorError(
            f"cannot read {RESULTS_FILE} in {out_dir!r} ({exc}): pass the output directory of a completed run"
        ) from None
    judged = judge_score_names(results)
    if not judged:
        raise EvaluatorError(f"the run {out_dir!r} has no llm-judge score to sample by")
    score = score or judged[0]
    if score not in judged:
        raise EvaluatorError(f"--score {score!r} is not a judge score of the run; its judge scores: {judged}")
    metric = score.rsplit(".", 1)[0]
    names = [name.rsplit(".", 1)[1] for name in judged if name.rsplit(".", 1)[0] == metric]
    sampler: StratifiedSampler[float] = StratifiedSampler(rows, seed)
    for row in _rows(out_dir, ["item", "output_text", score]):
        value = row.get(score)
        if value is None or math.isnan(value):
            continue  # the judge gave no score: nothing to compare a label with
        item = json.loads(row["item"]) if row.get("item") else {}
        if key not in item:
            raise EvaluatorError(
                f"the run's rows have no field {key!r} to join labels by (a row holds {sorted(item)[:8]})",
                hint="Pass --key with a field that identifies each row; calibration.key must name the same field.",
            )
        sampler.add(
            value, {key: item[key], **dict.fromkeys(names), "output_text": row.get("output_text"), "item": item}
        )
    chosen = sampler.result()
    if output.lower().endswith(".csv"):
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=[key, *names, "output_text", "item"], lineterminator="\n")
        writer.writeheader()
        for record in chosen:
            writer.writerow({**record, "item": json.dumps(record["item"], ensure_ascii=False)})
        payload = text.getvalue()
    else:
        payload = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in chosen)
    write_file_atomically(output, payload.encode("utf-8"))
    offered = sampler.counts()
    return {f"{value:g}": offered[value] for value in sorted(offered)} | {"written": len(chosen)}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code (2 on an error)."""
    parser = argparse.ArgumentParser(
        prog="beameval judge-labels",
        description="Sample rows of a run for a person to label, stratified by a judge score, and write the labels "
        "file that an llm-judge's calibration.labels reads.",
    )
    parser.add_argument("directory", metavar="OUT_DIR", help="the output directory of a completed run")
    parser.add_argument("--output", required=True, help="the file to write (JSONL, or CSV when it ends in .csv)")
    parser.add_argument("--score", default=None, help="the judge score to stratify by (default: the first)")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"rows to sample (default {DEFAULT_ROWS})")
    parser.add_argument("--key", default="id", help="the dataset field that identifies a row (default id)")
    parser.add_argument("--seed", type=int, default=0, help="the sampling seed (default 0)")
    args = parser.parse_args(argv)
    try:
        counts = write_labels_file(args.directory, args.output, args.score, max(1, args.rows), args.key, args.seed)
    except EvaluatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    written = counts.pop("written")
    levels = ", ".join(f"{value}: {count}" for value, count in counts.items())
    print(f"{args.output}: {written} rows to label (judged rows by value: {levels}); fill in the empty score fields")
    return 0


if __name__ == "__main__":
    sys.exit(main())
