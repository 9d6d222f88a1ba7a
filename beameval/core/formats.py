"""Dataset file formats: counting and parsing records from an open binary stream.

Beam-free so the parsing rules are unit-testable alone. Values are kept as written:
JSON types stay JSON types, CSV cells stay strings, and nothing is coerced into dates
(the reference SDK's pyarrow readers mutate values). A record
that cannot be parsed is yielded as a failure at its position, never skipped.

Limits, the same for every format (docs/FAILURES.md): a text cell may hold up to
``MAX_CELL_CHARS`` characters and a row may nest ``MAX_NESTING`` levels
(``beameval.core.sanitize``); column names must be unique; a gzip file must be complete
(a stream cut before its end marker, or with a bad CRC, is an error naming the file,
never a silently shorter dataset).
"""

from __future__ import annotations

import csv
import gzip
import json
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from beameval.core.errors import DatasetError
from beameval.core.sanitize import MAX_CELL_CHARS, MAX_NESTING

__all__ = [
    "Record",
    "arrow_record_bytes",
    "count_records",
    "detect_format",
    "hashing_reader",
    "is_gzip_path",
    "iter_records",
    "open_checked_gzip",
    "parquet_row_group_sizes",
    "read_parquet_row_group",
    "read_parquet_table",
]

# CSV's own limit (131,072 by default) would fail the whole file on one long cell; the
# per-row check in ``sanitize.check_row`` applies the same MAX_CELL_CHARS as for JSONL and Parquet.
csv.field_size_limit(max(csv.field_size_limit(), 2 * MAX_CELL_CHARS))

FORMATS = ("jsonl", "parquet", "csv")
_EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".csv": "csv"}

#: (item, raw text, error message); exactly one of item / error is set.
Record = tuple[dict[str, Any] | None, str | None, str | None]


def detect_format(path: str, configured: str) -> str:
    """The format of ``path``: the configured one, or by extension (``.gz`` ignored).

    Raises:
        DatasetError: ``auto`` was configured and the extension is not known.
    """
    if configured != "auto":
        return configured
    name = path.lower().removesuffix(".gz").removesuffix(".gzip")
    for extension, fmt in _EXTENSIONS.items():
        if name.endswith(extension):
            return fmt
    raise DatasetError(
        f"cannot tell the format of {path!r} from its extension; set dataset.format to one of {', '.join(FORMATS)}."
    )


def is_gzip_path(path: str) -> bool:
    """Whether ``path`` names a gzip file (``.gz``, ``.gzip``), which ``open_checked_gzip`` must read."""
    return path.lower().endswith((".gz", ".gzip"))


class _CheckedGzip:
    """A gzip reader whose truncation and CRC errors are DatasetErrors naming the file.

    Python's own ``gzip`` reader checks the end-of-stream marker and the CRC (a reader
    that stops at the end of the data would make a file cut mid-stream look like a
    shorter dataset).
    """

    def __init__(self, raw: IO[bytes], path: str) -> None:
        self._file = gzip.GzipFile(fileobj=raw, mode="rb")
        self._path = path

    def read(self, size: int = -1) -> bytes:
        try:
            return self._file.read(size)
        except (EOFError, OSError, zlib.error) as exc:
            raise self._error(exc) from None

    def readline(self, size: int = -1) -> bytes:
        try:
            return self._file.readline(size)
        except (EOFError, OSError, zlib.error) as exc:
            raise self._error(exc) from None

    def _error(self, exc: BaseException) -> DatasetError:
        if isinstance(exc, EOFError):
            what = "is cut short: the gzip stream ends before its end-of-stream marker"
        elif "crc" in str(exc).lower():
            what = "is corrupt: its gzip CRC check failed"
        else:
            what = f"is not a valid gzip file ({exc})"
        return DatasetError(
            f"dataset file {self._path} {what}, so rows may be missing; re-create or re-download the file "
            "(gzip -t checks it)."
        )

    def close(self) -> None:
        self._file.close()


def open_checked_gzip(raw: IO[bytes], path: str) -> IO[bytes]:
    """Wrap an undecompressed stream of a gzip file so a truncated or corrupt file raises DatasetError.

    Args:
        raw: the file's bytes as stored (open it without the file system's own decompression).
        path: the file's path, for messages.

    Returns:
        A stream with ``read`` and ``readline`` over the decompressed bytes.
    """
    return _CheckedGzip(raw, path)  # type: ignore[return-value]


def count_records(stream: IO[bytes], path: str, fmt: str) -> int:
    """How many records ``iter_records`` will yield for this JSONL or CSV file (failed ones included).

    JSONL lines are counted, not parsed: each non-blank line is one record, good or failed.
    """
    if fmt != "jsonl":
        return sum(1 for _ in iter_records(stream, path, fmt))
    count = 0
    for line in iter(stream.readline, b""):
        if not line.strip():
            continue
        if count == 0 and _starts_json_array(line):
            return sum(1 for _ in _iter_json_array(line + stream.read(), path))
        count += 1
    return count


def parquet_row_group_sizes(stream: IO[bytes], path: str | None = None) -> list[int]:
    """Rows per row group of a Parquet file (read from its footer only).

    Raises:
        DatasetError: two columns have the same name (reading would keep only the last).
    """
    parquet = pq.ParquetFile(stream)
    _unique_columns(parquet.schema_arrow.names, path or str(getattr(stream, "name", "the Parquet file")))
    metadata = parquet.metadata
    return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]


def _unique_columns(names: Sequence[str], path: str) -> None:
    repeated = sorted(name for name, count in Counter(names).items() if count > 1)
    if repeated:
        raise DatasetError(
            f"{path} has more than one column named {repeated[0]!r}"
            + (f" (also {repeated[1:]})" if len(repeated) > 1 else "")
            + "; only one value per name can be kept, so rename or drop the duplicates."
        )


def read_parquet_row_group(stream: IO[bytes], group: int) -> list[dict[str, Any]]:
    """The rows of one Parquet row group as dicts."""
    return read_parquet_table(stream, group).to_pylist()


def read_parquet_table(stream: IO[bytes], group: int) -> pa.Table:
    """One Parquet row group as an Arrow table."""
    return pq.ParquetFile(stream).read_row_group(group)


def arrow_record_bytes(table: pa.Table) -> pa.Buffer:
    """The records of ``table`` as bytes: its Arrow IPC stream (schema, then the columns in one batch).

    Chunking and schema metadata (pandas' notes) are left out, so the bytes depend only
    on the column names, types and values; what the dataset fingerprint hashes for Parquet.
    """
    table = table.replace_schema_metadata(None).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


class _HashingReader:
    """A stream's ``read`` and ``readline``, passing every byte read to ``sink``."""

    def __init__(self, stream: IO[bytes], sink: Callable[[bytes], None]) -> None:
        self._stream = stream
        self._sink = sink

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._sink(data)
        return data

    def readline(self, size: int = -1) -> bytes:
        line = self._stream.readline(size)
        self._sink(line)
        return line


def hashing_reader(stream: IO[bytes], sink: Callable[[bytes], None]) -> IO[bytes]:
    """``stream``, passing every byte read through it to ``sink`` (the records as stored).

    The dataset fingerprint hashes a JSONL or CSV file's bytes this way as the parser reads
    them, instead of re-serialising each parsed row.
    """
    return _HashingReader(stream, sink)  # type: ignore[return-value]


def iter_records(stream: IO[bytes], path: str, fmt: str) -> Iterator[Record]:
    """Yield every record of a JSONL (or JSON array) or CSV file in order."""
    if fmt == "jsonl":
        yield from _iter_json(stream, path)
    elif fmt == "csv":
        yield from _iter_csv(stream, path)
    else:
        raise ValueError(f"iter_records does not read {fmt}")


def _iter_json(stream: IO[bytes], path: str) -> Iterator[Record]:
    # readline, not iteration or peek: Beam's decompressing reader offers only read/readline.
    lines = iter(stream.readline, b"")
    first = True
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if first and _starts_json_array(line):
            yield from _iter_json_array(line + stream.read(), path)
            return
        first = False
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield (
                None,
                line.decode("utf-8", "replace").rstrip("\r\n"),
                f"{path} line {line_number} is not valid UTF-8 (byte {exc.start}); re-encode the file as UTF-8.",
            )
            continue
        yield _json_object(text.removeprefix("\ufeff") if line_number == 1 else text, f"{path} line {line_number}")


def _starts_json_array(first_line: bytes) -> bool:
    """A file whose first non-blank line starts with ``[`` (after a BOM) is one JSON array, not JSONL."""
    return first_line.lstrip(b"\xef\xbb\xbf \t").startswith(b"[")


def _json_object(text: str, where: str) -> Record:
    try:
        value = json.loads(text)
    except RecursionError:  # nested thousands of levels deep: too deep for the parser itself
        return None, _excerpt(text), f"{where} is nested more than {MAX_NESTING} levels deep (the limit); flatten it."
    except json.JSONDecodeError as exc:
        return (
            None,
            text.rstrip("\r\n"),
            f"{where} is not valid JSON ({exc.msg} at column {exc.colno}); fix or remove the line.",
        )
    if not isinstance(value, dict):
        return (
            None,
            text.rstrip("\r\n"),
            f"{where} is a JSON {type(value).__name__}, but each row must be a JSON object.",
        )
    return value, None, None


def _iter_json_array(data: bytes, path: str) -> Iterator[Record]:
    try:
        rows = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path} starts with '[' but is not a valid JSON array: {exc}.") from None
    except RecursionError:
        raise DatasetError(
            f"{path} is nested more than {MAX_NESTING} levels deep (the limit); flatten its rows."
        ) from None
    for position, value in enumerate(rows):
        if isinstance(value, dict):
            yield value, None, None
        else:
            yield (
                None,
                json.dumps(value),
                (f"{path} element {position} is a JSON {type(value).__name__}, but each row must be an object."),
            )


def _iter_csv(stream: IO[bytes], path: str) -> Iterator[Record]:
    # surrogateescape keeps undecodable bytes as lone surrogates, so a bad byte fails its
    # own row (with its line number) instead of the whole file; utf-8-sig drops a BOM.
    # Lines come from readline (Beam's decompressing reader offers nothing else); csv joins
    # the lines of a quoted multi-line field itself.
    lines = (line.decode("utf-8", "surrogateescape") for line in iter(stream.readline, b""))
    reader = csv.reader(line.removeprefix("\ufeff") if number == 0 else line for number, line in enumerate(lines))
    try:
        header = next(reader, None)
        if header is None:
            return
        if any(_has_bad_bytes(name) for name in header):
            raise DatasetError(f"{path} line 1 (the header) is not valid UTF-8; re-encode the file as UTF-8.")
        _unique_columns(header, f"{path} line 1 (the header)")
        for cells in reader:
            if not cells:
                continue
            bad = next((i for i, cell in enumerate(cells) if _has_bad_bytes(cell)), None)
            if bad is not None:
                column = f" (column {header[bad]!r})" if bad < len(header) else ""
                yield (
                    None,
                    _printable(",".join(cells)),
                    f"{path} line {reader.line_num} is not valid UTF-8{column}; re-encode the file as UTF-8.",
                )
                continue
            if len(cells) != len(header):
                raw = ",".join(cells)
                yield (
                    None,
                    raw,
                    (
                        f"{path} line {reader.line_num} has {len(cells)} fields but the header has "
                        f"{len(header)}; fix the row (quote fields that contain commas)."
                    ),
                )
                continue
            yield dict(zip(header, cells, strict=True)), None, None
    except csv.Error as exc:
        raise DatasetError(f"{path} line {reader.line_num} is not valid CSV: {exc}.") from None


def _excerpt(text: str, limit: int = 200) -> str:
    """The start of a raw record, for the ``item`` of a failed row (a huge one is not copied whole)."""
    text = text.rstrip("\r\n")
    return text if len(text) <= limit else text[:limit] + "…"


def _has_bad_bytes(text: str) -> bool:
    """True when ``text`` holds bytes that were not UTF-8 (decoded as lone surrogates)."""
    return any("\udc80" <= char <= "\udcff" for char in text)


def _printable(text: str) -> str:
    """``text`` with undecodable bytes shown as U+FFFD, safe to write as UTF-8."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
