"""Reading the human labels a judge is calibrated against (JSONL or CSV), checked line by line.

One record per labelled row: the ``key`` field (matched, as text, against the dataset
field of that name) and one value per judge score, a number for a range score and a
label for a rubric score. A missing, null or blank value leaves that score unlabelled on
that row. Each value becomes its category index (``Categories``), so a bad value is
reported here, with the file and line, before any row is sent.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from beameval.core.errors import DatasetError

__all__ = ["Categories", "read_labels"]


@dataclass(frozen=True)
class Categories:
    """The ordered categories of one judge score: a rubric's labels by value, or a range's integers."""

    name: str
    values: tuple[float, ...]
    labels: tuple[str, ...] | None  # a rubric's labels, in category order; None for a range score

    def index_of_label(self, value: Any) -> int:
        """The category of a human label; ValueError with the reason when it is not one."""
        if self.labels is not None:
            if not isinstance(value, str) or value not in self.labels:
                raise ValueError(f"{value!r} is not one of the rubric's labels {list(self.labels)}")
            return self.labels.index(value)
        number = _number(value)
        index = self.index_of_value(number)
        if index is None:
            raise ValueError(f"{value!r} is not a whole number from {self.values[0]:g} to {self.values[-1]:g}")
        return index

    def index_of_value(self, value: float) -> int | None:
        """The category of a range score's value, None when it is not one of the whole numbers."""
        if not math.isfinite(value) or value != round(value):
            return None
        index = round(value - self.values[0])
        return index if 0 <= index < len(self.values) else None


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ValueError(f"{value!r} is not a number")


def _records(path: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(line number, record) of a JSONL or CSV file (CSV when the name ends in .csv)."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            if path.lower().endswith(".csv"):
                reader = csv.DictReader(handle)
                for record in reader:
                    yield reader.line_num, record
                return
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"labels file {path}, line {number}: not valid JSON ({exc.msg})") from None
                if not isinstance(record, dict):
                    raise DatasetError(f"labels file {path}, line {number}: expected a JSON object")
                yield number, record
    except OSError as exc:
        raise DatasetError(
            f"cannot read the labels file {path}: {exc.strerror or exc}",
            hint="calibration.labels is a local JSONL or CSV file of human labels.",
        ) from None


def read_labels(path: str, key: str, categories: Sequence[Categories]) -> dict[str, tuple[int | None, ...]]:
    """Row key -> the category index of each score's human label (None: not labelled).

    Raises:
        DatasetError: the file cannot be read, a line is not a record, has no key, repeats
            a key, or holds a value that is not one of its score's categories.
    """
    labels: dict[str, tuple[int | None, ...]] = {}
    lines: dict[str, int] = {}
    for number, record in _records(path):
        where = f"labels file {path}, line {number}"
        row_key = record.get(key)
        if row_key is None or row_key == "":
            raise DatasetError(f"{where}: no value for the key field {key!r}", hint="Set calibration.key.")
        text = str(row_key)
        if text in lines:
            raise DatasetError(f"{where}: the key {text!r} was already labelled on line {lines[text]}")
        values: list[int | None] = []
        for score in categories:
            value = record.get(score.name)
            if value is None or (isinstance(value, str) and not value.strip()):
                values.append(None)
                continue
            try:
                values.append(score.index_of_label(value.strip() if isinstance(value, str) else value))
            except ValueError as exc:
                raise DatasetError(f"{where}: score {score.name!r}: {exc}") from None
        lines[text] = number
        labels[text] = tuple(values)
    if not labels:
        raise DatasetError(f"labels file {path} holds no labelled rows")
    return labels
