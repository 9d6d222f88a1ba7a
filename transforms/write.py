"""Writers: ``rows/`` as Parquet shards, ``errors/`` as JSONL shards, and the run summary.

Beam's file sinks write shards from the workers; nothing is gathered in the driver.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils.windowed_value import WindowedValue

from beameval.core.records import ScoredRow
from transforms.async_calls import in_global_window
from transforms.guard import guarded
from transforms.row_batches import rows_of

__all__ = ["SUMMARY_FILE", "WriteErrors", "WriteRows", "WriteSummary", "rows_schema"]

SUMMARY_FILE = "_summary.json"
#: Rows per Arrow table handed to the Parquet writer.
BATCH_ROWS = 5000

_INFERENCE_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("latency_ms", pa.float64()),
    ("attempts", pa.int64()),
    ("http_status", pa.int64()),
    ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()),
    ("request_hash", pa.string()),
    ("cached", pa.bool_()),
    ("request", pa.string()),
]


def rows_schema(score_names: list[str], label_names: list[str], detail_names: Sequence[str] = ()) -> pa.Schema:
    """The ``rows/`` schema: README "Outputs" columns, one float per score, then inference facts and details."""
    fields = [
        pa.field("row_index", pa.int64(), nullable=False),
        pa.field("sample_index", pa.int64(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("item", pa.string()),
        pa.field("output_text", pa.string()),
        *(pa.field(name, pa.float64()) for name in score_names),
        *(pa.field(name, pa.string()) for name in label_names),
        pa.field("error", pa.string()),
        pa.field("notes", pa.string()),
        *(pa.field(name, kind) for name, kind in _INFERENCE_COLUMNS),
        *(pa.field(name, pa.string()) for name in detail_names),  # id, judge replies, predicted calls
    ]
    return pa.schema(fields)


def _status(row: ScoredRow) -> str:
    return "ok" if row.failure is None else "skipped" if row.failure.skipped else "error"


def row_record(row: ScoredRow, label_names: list[str]) -> dict[str, Any]:
    """A ScoredRow as a ``rows/`` record."""
    info = row.inference
    record: dict[str, Any] = {
        "row_index": row.row_index,
        "sample_index": row.sample_index,
        "status": _status(row),
        "item": row.item_json,
        "output_text": row.output_text,
        **row.scores,
        "error": None if row.failure is None else row.failure.text,
        "notes": "; ".join(row.notes) if row.notes else None,
        "latency_ms": None if info.latency_s is None else info.latency_s * 1000.0,
        "attempts": info.attempts,
        "http_status": info.http_status,
        "prompt_tokens": info.prompt_tokens,
        "completion_tokens": info.completion_tokens,
        "request_hash": info.request_hash,
        "cached": info.cached,
        "request": info.request,
    }
    for name in label_names:
        record[name] = row.labels.get(name)
    record.update(row.details)
    return record


def row_columns(rows: Sequence[ScoredRow], schema: pa.Schema, label_names: list[str]) -> pa.Table:
    """Scored rows as one ``rows/`` table, built column by column (what ``row_record`` gives, per row, for a batch).

    Raises:
        Exception: a row lacks what a column needs, or Arrow refuses a value (the caller
            then converts row by row to find it).
    """
    infos = [row.inference for row in rows]
    columns: dict[str, list[Any]] = {
        "row_index": [row.row_index for row in rows],
        "sample_index": [row.sample_index for row in rows],
        "status": [_status(row) for row in rows],
        "item": [row.item_json for row in rows],
        "output_text": [row.output_text for row in rows],
        "error": [None if row.failure is None else row.failure.text for row in rows],
        "notes": ["; ".join(row.notes) if row.notes else None for row in rows],
        "latency_ms": [None if info.latency_s is None else info.latency_s * 1000.0 for info in infos],
        "attempts": [info.attempts for info in infos],
        "http_status": [info.http_status for info in infos],
        "prompt_tokens": [info.prompt_tokens for info in infos],
        "completion_tokens": [info.completion_tokens for info in infos],
        "request_hash": [info.request_hash for info in infos],
        "cached": [info.cached for info in infos],
        "request": [info.request for info in infos],
    }
    for name in schema.names:
        if name in columns:
            continue
        if name in label_names:
            columns[name] = [row.labels.get(name) for row in rows]
        elif pa.types.is_floating(schema.field(name).type):  # a score
            columns[name] = [row.scores.get(name) for row in rows]
        else:  # a detail: id, judge replies, predicted calls
            columns[name] = [row.details.get(name) for row in rows]
    return pa.Table.from_pydict(columns, schema=schema)


class _ToArrowBatches(beam.DoFn):
    """Turn scored rows into Arrow tables of up to ``BATCH_ROWS`` rows (one C++ conversion per column and batch).

    A batch is built column by column; when that raises (a row missing a field, a value
    Arrow refuses), the batch is converted row by row through the guard instead, so only
    the row at fault becomes a failed record.
    """

    def __init__(self, schema: pa.Schema, label_names: list[str]) -> None:
        self._schema = schema
        self._label_names = label_names

    def start_bundle(self) -> None:
        self._batch: list[ScoredRow] = []

    def process(self, element: ScoredRow | list[ScoredRow]) -> Iterator[pa.Table]:
        self._batch.extend(rows_of(element))
        if len(self._batch) >= BATCH_ROWS:
            yield self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._batch:
            yield in_global_window(self._flush())

    def _flush(self) -> pa.Table:
        batch, self._batch = self._batch, []
        try:
            return row_columns(batch, self._schema, self._label_names)
        except Exception:  # noqa: BLE001 - find the row no writer accepts; the rest of the batch is written
            records = [self._record(row) for row in batch]
        try:
            return pa.Table.from_pylist(records, schema=self._schema)
        except Exception:  # noqa: BLE001
            return pa.Table.from_pylist([self._convertible(record) for record in records], schema=self._schema)

    def _record(self, row: ScoredRow) -> dict[str, Any]:
        return guarded(
            "WriteRows",
            "scoring",
            row.row_index,
            lambda: row_record(row, self._label_names),
            lambda failure: _failed_record(
                {"row_index": row.row_index, "sample_index": getattr(row, "sample_index", 0)},
                self._schema,
                failure.text,
            ),
        )

    def _convertible(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` if Arrow takes it, else the row as a failed row holding only what can be written."""
        return guarded(
            "WriteRows",
            "scoring",
            record.get("row_index"),
            lambda: _checked(record, self._schema),
            lambda failure: _failed_record(record, self._schema, failure.text),
        )


def _checked(record: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
    pa.Table.from_pylist([record], schema=schema)  # raises for a value Arrow refuses
    return record


def _failed_record(record: dict[str, Any], schema: pa.Schema, message: str) -> dict[str, Any]:
    """A ``rows/`` record that Arrow could not convert, reduced to its position, status and the cause."""
    failed: dict[str, Any] = dict.fromkeys(schema.names)
    for name in schema.names:
        if pa.types.is_floating(schema.field(name).type):
            failed[name] = math.nan
    index = record.get("row_index")
    sample = record.get("sample_index")
    failed.update(
        row_index=index if isinstance(index, int) else -1,
        sample_index=sample if isinstance(sample, int) and "sample_index" in failed else 0,
        status="error",
        error=message,
        item="(not stored: the row could not be written)",
    )
    return {name: failed[name] for name in schema.names}


class WriteRows(beam.PTransform):
    """Write every scored row (or batch of them) to ``<output>/rows/`` as Parquet shards."""

    def __init__(
        self, output: str, score_names: list[str], label_names: list[str], detail_names: Sequence[str] = ()
    ) -> None:
        super().__init__()
        self._prefix = FileSystems.join(output, "rows", "rows")
        self._schema = rows_schema(score_names, label_names, detail_names)
        self._label_names = label_names

    def expand(self, rows: beam.PCollection[ScoredRow]) -> Any:
        return (
            rows
            | "ToArrow" >> beam.ParDo(_ToArrowBatches(self._schema, self._label_names))
            | "Parquet" >> beam.io.WriteToParquetBatched(self._prefix, self._schema, file_name_suffix=".parquet")
        )


class WriteErrors(beam.PTransform):
    """Write one JSON line per failed row to ``<output>/errors/``."""

    def __init__(self, output: str) -> None:
        super().__init__()
        self._prefix = FileSystems.join(output, "errors", "errors")

    def expand(self, records: beam.PCollection[str]) -> Any:
        return records | "Jsonl" >> beam.io.WriteToText(self._prefix, file_name_suffix=".jsonl")


def _write_summary(summary: dict[str, Any], path: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(json.dumps(summary).encode("utf-8"))


class WriteSummary(beam.PTransform):
    """Write the run summary to ``<output>/_summary.json`` for the driver to finish from."""

    def __init__(self, output: str) -> None:
        super().__init__()
        self._path = FileSystems.join(output, SUMMARY_FILE)

    def expand(self, summary: beam.PCollection[dict[str, Any]]) -> Any:
        return summary | "Json" >> beam.Map(_write_summary, self._path)
