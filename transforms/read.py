"""ReadRows: dataset files -> InputRow with a stable ``row_index``.

Files are listed and sorted by path, then planned into splits (a whole JSONL/CSV file,
or one Parquet row group) whose record counts are measured in the pipeline. A split's
first ``row_index`` is the number of records in every split before it, so indices are
the rows' positions in the dataset on every runner and worker count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from beameval.core.errors import DatasetError
from beameval.core.formats import (
    count_records,
    detect_format,
    iter_records,
    parquet_row_group_sizes,
    read_parquet_row_group,
)
from beameval.core.records import InputRow, RowFailure
from transforms import NAMESPACE

__all__ = ["ReadRows", "list_dataset_files"]


class Split(NamedTuple):
    """A unit of reading: a whole file (``group`` -1) or one Parquet row group."""

    path: str
    fmt: str
    group: int
    rows: int


def list_dataset_files(pattern: str) -> list[str]:
    """The files matching a path or glob, sorted, on any Beam file system.

    Raises:
        DatasetError: nothing matches, or the file system is unavailable.
    """
    try:
        matches = FileSystems.match([pattern])[0].metadata_list
    except ValueError as exc:  # unknown scheme: the Beam extra is missing
        raise DatasetError(
            f"cannot read {pattern!r}: {exc}. For gs:// install the [gcp] extra, for s3:// the [aws] extra."
        ) from None
    except Exception as exc:  # noqa: BLE001 - Beam wraps every listing failure differently
        raise DatasetError(f"cannot list dataset path {pattern!r}: {exc}") from None
    paths = sorted(m.path for m in matches if not m.path.endswith("/") and not os.path.isdir(m.path))
    if not paths:
        if os.path.isdir(pattern):
            raise DatasetError(
                f"dataset path {pattern!r} is a directory; point dataset.path at its files with a glob, "
                f"e.g. '{pattern.rstrip('/')}/*.jsonl'."
            )
        raise DatasetError(f"dataset path {pattern!r} matches no files; check dataset.path.")
    return paths


def plan_splits(path: str, configured_format: str) -> list[Split]:
    """Measure one file: its Parquet row groups, or its whole record count.

    Raises:
        DatasetError: the file cannot be opened or is not in its format (e.g. a corrupt Parquet file).
    """
    fmt = detect_format(path, configured_format)
    with _reading(path), FileSystems.open(path) as stream:
        if fmt == "parquet":
            return [Split(path, fmt, group, rows) for group, rows in enumerate(parquet_row_group_sizes(stream))]
        return [Split(path, fmt, -1, count_records(stream, path, fmt))]


@contextmanager
def _reading(path: str) -> Iterator[None]:
    """Turn a file system or pyarrow failure while reading ``path`` into a DatasetError naming it."""
    try:
        yield
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow and every file system raise their own types
        raise DatasetError(f"cannot read dataset file {path!r}: {type(exc).__name__}: {exc}") from None


def read_split_counted(split: Split, all_splits: list[Split], limit: int | None) -> Iterator[InputRow]:
    """``read_split``, adding the rows it yields to the ``rows_read`` counter (once per split)."""
    count = 0
    for row in read_split(split, all_splits, limit):
        count += 1
        yield row
    Metrics.counter(NAMESPACE, "rows_read").inc(count)


def read_split(split: Split, all_splits: list[Split], limit: int | None) -> Iterator[InputRow]:
    """Yield the split's rows with their dataset positions, stopping at ``limit``."""
    offset = sum(s.rows for s in all_splits if (s.path, s.group) < (split.path, split.group))
    if limit is not None and offset >= limit:
        return
    stop = split.rows if limit is None else min(split.rows, limit - offset)
    if split.fmt == "parquet":
        with _reading(split.path), FileSystems.open(split.path) as stream:
            items = read_parquet_row_group(stream, split.group)[:stop]
        for position, row in enumerate(items):
            yield InputRow(offset + position, row)
        return
    with FileSystems.open(split.path) as stream:
        for position, (item, raw, error) in enumerate(iter_records(stream, split.path, split.fmt)):
            if position >= stop:
                return
            failure = RowFailure("input", [error]) if error else None
            yield InputRow(offset + position, item, raw, failure)


class ReadRows(beam.PTransform):
    """Read every row of the dataset files, each exactly once, with its ``row_index``.

    Args:
        paths: the files to read (from ``list_dataset_files``).
        fmt: the configured format (``auto`` picks by extension).
        limit: keep only rows with ``row_index < limit``.
    """

    def __init__(self, paths: list[str], fmt: str, limit: int | None) -> None:
        super().__init__()
        self._paths = paths
        self._fmt = fmt
        self._limit = limit

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[InputRow]:
        splits = pbegin | "ListFiles" >> beam.Create(self._paths) | "PlanSplits" >> beam.FlatMap(plan_splits, self._fmt)
        self.splits = splits  # the planned Split records, for consumers that need the row total (progress)
        return (
            splits
            | "Distribute" >> beam.Reshuffle()
            | "ReadSplits" >> beam.FlatMap(read_split_counted, all_splits=beam.pvalue.AsList(splits), limit=self._limit)
        )
