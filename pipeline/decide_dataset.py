"""The driver's look at the dataset for a multi-target ``--decide``: how many rows, and one row's item.

A multi-target run has no baseline run to list its rows, so the order's domain is
``range(rows)`` counted here (JSONL lines are counted, not parsed; Parquet from its
footers), and the first row of the order is read here for the preflight's real request.
Row positions follow ``transforms.read``: files sorted, records in file order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from apache_beam.io.filesystems import FileSystems

from beameval.core.formats import (
    count_records,
    detect_format,
    is_gzip_path,
    iter_records,
    open_checked_gzip,
    parquet_row_group_sizes,
    read_parquet_row_group,
)

__all__ = ["row_count", "row_item"]


@contextmanager
def _opened(path: str) -> Iterator[IO[bytes]]:
    with FileSystems.open(path) as raw:
        yield open_checked_gzip(raw, path) if is_gzip_path(path) else raw


def _sizes(path: str, fmt: str) -> list[int]:
    """Rows per Parquet row group, or the file's record count as one block."""
    with _opened(path) as stream:
        return parquet_row_group_sizes(stream, path) if fmt == "parquet" else [count_records(stream, path, fmt)]


def row_count(paths: list[str], configured: str) -> int:
    """The rows of the dataset (failed records included, as the run counts them)."""
    return sum(sum(_sizes(path, detect_format(path, configured))) for path in paths)


def row_item(paths: list[str], configured: str, index: int) -> dict[str, Any] | None:
    """The item of row ``index`` (None when it cannot be parsed, or is past the end)."""
    start = 0
    for path in paths:
        fmt = detect_format(path, configured)
        sizes = _sizes(path, fmt)
        if index >= start + sum(sizes):
            start += sum(sizes)
            continue
        offset = index - start
        with _opened(path) as stream:
            if fmt == "parquet":
                for group, size in enumerate(sizes):
                    if offset < size:
                        return read_parquet_row_group(stream, group)[offset]
                    offset -= size
            for position, (item, _raw, _error) in enumerate(iter_records(stream, path, fmt)):
                if position == offset:
                    return item
    return None
