"""ReadRows: dataset files -> InputRow with a stable ``row_index``, and the dataset's fingerprint.

Files are listed and sorted by path, then planned into splits (a whole JSONL/CSV file,
or one Parquet row group) whose record counts are measured in the pipeline. A split's
first ``row_index`` is the number of records in every split before it, so indices are
the rows' positions in the dataset on every runner and worker count.

Each split is hashed as it is read, from the bytes the reader already holds (the file's
lines; a row group's Arrow columns), and a Parquet row group is checked as one Arrow batch
(``batch_checks``): per row, a clean row group costs only the dict Arrow builds.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.io.filesystems import CompressionTypes, FileSystems
from apache_beam.metrics import Metrics

from beameval.compare.identity import DatasetFingerprint, RecordsDigest
from beameval.core.batch_checks import arrow_rows_clean
from beameval.core.errors import DatasetError
from beameval.core.formats import (
    arrow_record_bytes,
    count_records,
    detect_format,
    hashing_reader,
    is_gzip_path,
    iter_records,
    open_checked_gzip,
    parquet_row_group_sizes,
    read_parquet_table,
)
from beameval.core.records import InputRow, RowFailure
from beameval.core.sanitize import RowTooLarge, check_row, clean_text
from beameval.retrieval.beir import QUERIES_FILE, qrels_file, query_rows, read_qrels, read_queries
from transforms import NAMESPACE
from transforms.guard import guarded
from transforms.row_batches import RowBatch

__all__ = ["FINGERPRINTS", "DatasetFingerprintFn", "ReadRows", "list_dataset_files", "read_beir_rows"]


class Split(NamedTuple):
    """A unit of reading: a whole file (``group`` -1) or one Parquet row group."""

    path: str
    fmt: str
    group: int
    rows: int


def list_dataset_files(pattern: str, fmt: str = "auto", split: str | None = None) -> list[str]:
    """The files matching a path or glob, sorted, on any Beam file system.

    A BEIR folder (``fmt`` ``beir``) is one "file": its ``qrels/<split>.tsv``, from which
    the reader finds ``queries.jsonl`` beside it.

    Raises:
        DatasetError: nothing matches, or the file system is unavailable.
    """
    if fmt == "beir":
        return [_beir_qrels_path(pattern, split or "test")]
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
        where = ""
        if "://" not in pattern and not os.path.isabs(pattern):
            where = f" (a relative path is read from the directory the command runs in, {os.getcwd()!r})"
        raise DatasetError(f"dataset path {pattern!r} matches no files{where}; check dataset.path.")
    return paths


def plan_splits(path: str, configured_format: str) -> list[Split]:
    """Measure one file: its Parquet row groups, or its whole record count.

    Raises:
        DatasetError: the file cannot be opened or is not in its format (e.g. a corrupt Parquet file).
    """
    fmt = detect_format(path, configured_format)
    if fmt == "beir":
        return [Split(path, fmt, -1, len(read_beir_rows(path)))]
    with _reading(path):
        if fmt == "parquet":
            with FileSystems.open(path) as stream:
                sizes = parquet_row_group_sizes(stream, path)
            return [Split(path, fmt, group, rows) for group, rows in enumerate(sizes)]
        with _open_text_file(path) as stream:
            return [Split(path, fmt, -1, count_records(stream, path, fmt))]


@contextmanager
def _open_text_file(path: str) -> Iterator[Any]:
    """Open a JSONL/CSV file; a gzip file is decompressed by a reader that refuses a truncated or corrupt stream."""
    if not is_gzip_path(path):
        with FileSystems.open(path) as stream:
            yield stream
        return
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        yield open_checked_gzip(raw, path)


def _beir_qrels_path(folder: str, split: str) -> str:
    """The qrels file of a BEIR folder, checked to exist with its ``queries.jsonl``.

    Raises:
        DatasetError: the folder lacks either file.
    """
    folder = folder.rstrip("/")
    qrels = FileSystems.join(folder, *qrels_file(split).split("/"))
    with _reading(folder):
        missing = [path for path in (FileSystems.join(folder, QUERIES_FILE), qrels) if not FileSystems.exists(path)]
    if missing:
        raise DatasetError(
            f"dataset path {folder!r} is not a BEIR folder for split {split!r}: {' and '.join(missing)} "
            "missing (format: beir reads queries.jsonl and qrels/<split>.tsv; set dataset.split for another split)."
        )
    return qrels


def read_beir_rows(qrels_path: str, sink: Callable[[bytes], None] | None = None) -> list[dict[str, Any]]:
    """The rows of a BEIR folder named by its qrels file: one per judged query (``beameval.retrieval.beir``).

    Args:
        qrels_path: ``<folder>/qrels/<split>.tsv``; ``queries.jsonl`` is read from ``<folder>``.
        sink: receives every byte read (the dataset fingerprint), queries first.
    """
    folder = qrels_path.rsplit("/qrels/", 1)[0]
    queries_path = FileSystems.join(folder, QUERIES_FILE)
    with _reading(queries_path), _open_text_file(queries_path) as stream:
        queries = read_queries(stream if sink is None else hashing_reader(stream, sink), queries_path)
    with _reading(qrels_path), _open_text_file(qrels_path) as stream:
        qrels, lines = read_qrels(stream if sink is None else hashing_reader(stream, sink), qrels_path)
    return query_rows(queries, qrels, lines, qrels_path)


@contextmanager
def _reading(path: str) -> Iterator[None]:
    """Turn a file system or pyarrow failure while reading ``path`` into a DatasetError naming it."""
    try:
        yield
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow and every file system raise their own types
        raise DatasetError(f"cannot read dataset file {path!r}: {type(exc).__name__}: {exc}") from None


#: The tagged output of ReadSplits holding one ``(rows, RecordsDigest value)`` per split read.
FINGERPRINTS = "fingerprints"


class _ReadSplits(beam.DoFn):
    """Read one split: its rows on the main output (or lists of them), its fingerprint part on ``FINGERPRINTS``."""

    def __init__(self, limit: int | None, batch_rows: int | None) -> None:
        self._limit = limit
        self._batch_rows = batch_rows

    def setup(self) -> None:
        self._rows_read = Metrics.counter(NAMESPACE, "rows_read")

    def process(self, split: Split, all_splits: list[Split]) -> Iterator[Any]:
        offset = sum(s.rows for s in all_splits if (s.path, s.group) < (split.path, split.group))
        digest = RecordsDigest(offset)
        rows = read_split(split, offset, self._limit, digest)
        count = 0
        if self._batch_rows is None:
            for row in rows:
                count += 1
                yield row
        else:
            while batch := RowBatch(itertools.islice(rows, self._batch_rows)):
                count += len(batch)
                yield batch
        self._rows_read.inc(count)
        if count:
            yield beam.pvalue.TaggedOutput(FINGERPRINTS, (count, digest.value()))


def read_split(split: Split, offset: int, limit: int | None, digest: RecordsDigest) -> Iterator[InputRow]:
    """Yield the split's rows from position ``offset`` on, stopping at ``limit``; hash what is read into ``digest``."""
    if limit is not None and offset >= limit:
        return
    stop = split.rows if limit is None else min(split.rows, limit - offset)
    if split.fmt == "beir":
        for position, query in enumerate(read_beir_rows(split.path, digest.update)[:stop]):
            yield _input_row(offset + position, query, None, None)
        return
    if split.fmt == "parquet":
        with _reading(split.path), FileSystems.open(split.path) as stream:
            table = read_parquet_table(stream, split.group).slice(0, stop)
            digest.update(arrow_record_bytes(table))
            items = table.to_pylist()
        if _clean(table):  # no row can fail or change in check_row: no per-row walk, nothing to guard
            for position, item in enumerate(items):
                yield InputRow(offset + position, item)
            return
        for position, item in enumerate(items):
            yield _input_row(offset + position, item, None, None)
        return
    with _open_text_file(split.path) as stream:
        records = iter_records(hashing_reader(stream, digest.update), split.path, split.fmt)
        for position, (item, raw, error) in enumerate(itertools.islice(records, stop)):
            yield _input_row(offset + position, item, raw, error)


def _clean(table: Any) -> bool:
    """``arrow_rows_clean``, guarded: if the batch check itself breaks, the rows are checked one by one."""
    try:
        return arrow_rows_clean(table)
    except Exception:  # noqa: BLE001 - the per-row path is the fallback, and it is guarded
        return False


def _input_row(row_index: int, item: dict[str, Any] | None, raw: str | None, error: str | None) -> InputRow:
    """The InputRow of one record: parse failures, and rows too deep or too large, are failed ``input`` rows."""
    if error is not None or item is None:
        return InputRow(row_index, None, raw, RowFailure("input", [error or "the record could not be read"]))

    def build() -> InputRow:
        try:
            checked, notes = check_row(item)
        except RowTooLarge as exc:
            return InputRow(row_index, None, _summary(item), RowFailure("input", [f"row {row_index} {exc}."]))
        return InputRow(row_index, checked, notes=notes)

    return guarded(
        "ReadRows",
        "input",
        row_index,
        build,
        lambda failure: InputRow(row_index, None, _summary(item), failure),
    )


def _summary(item: dict[str, Any]) -> str:
    """What a failed row's ``item`` shows when the row itself cannot be written: its top-level keys."""
    return clean_text(f"(not stored: a row with keys {sorted(str(key) for key in item)[:20]})")[0]


class ReadRows(beam.PTransform):
    """Read every row of the dataset files, each exactly once, with its ``row_index``.

    Args:
        paths: the files to read (from ``list_dataset_files``).
        fmt: the configured format (``auto`` picks by extension).
        limit: keep only rows with ``row_index < limit``.
        batch_rows: emit lists of up to this many rows instead of one row per element
            (``transforms.row_batches``: the offline path).
    """

    def __init__(self, paths: list[str], fmt: str, limit: int | None, batch_rows: int | None = None) -> None:
        super().__init__()
        self._paths = paths
        self._fmt = fmt
        self._limit = limit
        self._batch_rows = batch_rows

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[InputRow]:
        splits = pbegin | "ListFiles" >> beam.Create(self._paths) | "PlanSplits" >> beam.FlatMap(plan_splits, self._fmt)
        self.splits = splits  # the planned Split records, for consumers that need the row total (progress)
        read_splits = beam.ParDo(_ReadSplits(self._limit, self._batch_rows), all_splits=beam.pvalue.AsList(splits))
        if self._batch_rows is not None:
            read_splits = read_splits.with_output_types(RowBatch)  # its coder (transforms.row_batches)
        read = (
            splits
            | "Distribute" >> beam.Reshuffle()
            | "ReadSplits" >> read_splits.with_outputs(FINGERPRINTS, main="rows")
        )
        self.fingerprints = read[FINGERPRINTS]  # one (rows, hash) per split, for DatasetFingerprintFn
        return read.rows


class DatasetFingerprintFn(beam.CombineFn):
    """The dataset's content fingerprint, folded from ``ReadRows.fingerprints`` (one part per split, no second pass).

    A split's part is its row count and the hash of its first row position and its records'
    bytes as read; the accumulator (``identity.DatasetFingerprint``) is two integers and order-free.
    """

    def create_accumulator(self) -> DatasetFingerprint:
        return DatasetFingerprint()

    def add_input(self, accumulator: DatasetFingerprint, part: tuple[int, int]) -> DatasetFingerprint:
        rows, hashed = part
        accumulator.add(hashed, rows)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[DatasetFingerprint]) -> DatasetFingerprint:
        return DatasetFingerprint.merge(accumulators)

    def extract_output(self, accumulator: DatasetFingerprint) -> dict[str, Any]:
        return {"rows": accumulator.rows, "fingerprint": accumulator.hexdigest()}
