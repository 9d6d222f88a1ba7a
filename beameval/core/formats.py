"""Dataset file formats: counting and parsing records from an open binary stream.

Beam-free so the parsing rules are unit-testable alone. Values are kept as written:
JSON types stay JSON types, CSV cells stay strings, and nothing is coerced into dates
(the reference's pyarrow readers mutate values; REFERENCE_BEHAVIOUR.md 11b.8). A record
that cannot be parsed is yielded as a failure at its position, never skipped.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import IO, Any

import pyarrow.parquet as pq

from beameval.core.errors import DatasetError

__all__ = ["Record", "count_records", "detect_format", "iter_records", "parquet_row_group_sizes"]

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


def parquet_row_group_sizes(stream: IO[bytes]) -> list[int]:
    """Rows per row group of a Parquet file (read from its footer only)."""
    metadata = pq.ParquetFile(stream).metadata
    return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]


def read_parquet_row_group(stream: IO[bytes], group: int) -> list[dict[str, Any]]:
    """The rows of one Parquet row group as dicts."""
    return pq.ParquetFile(stream).read_row_group(group).to_pylist()


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


def _has_bad_bytes(text: str) -> bool:
    """True when ``text`` holds bytes that were not UTF-8 (decoded as lone surrogates)."""
    return any("\udc80" <= char <= "\udcff" for char in text)


def _printable(text: str) -> str:
    """``text`` with undecodable bytes shown as U+FFFD, safe to write as UTF-8."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
