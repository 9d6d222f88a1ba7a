"""Join keys, their hash buckets, and the mergeable tally of a whole comparison.

A row's key is its ``row_index`` (an integer) or, with ``--key FIELD``, the canonical JSON text
of the item's field, so ``1``, ``1.0``, ``true`` and ``"1"`` stay four different keys and any
JSON value can key a row.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from beameval.compare.paired import PairedSums

__all__ = ["BASELINE", "CANDIDATE", "SIDES", "PairTally", "bucket_of", "field_key", "key_text", "key_value"]

BASELINE = 0
CANDIDATE = 1
SIDES = ("baseline", "candidate")


def field_key(value: Any) -> str:
    """The join key of an item field's value: its canonical JSON."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def key_value(key: str | int) -> Any:
    """The value a key stands for (the field's JSON value, or the row index)."""
    return key if isinstance(key, int) else json.loads(key)


def key_text(key: str | int) -> str:
    """A key as messages show it: its JSON."""
    return str(key) if isinstance(key, int) else key


def bucket_of(key: str | int, buckets: int) -> int:
    """The hash bucket of a key: stable across processes and machines (Python's ``hash`` of a str is not)."""
    if isinstance(key, int):
        return key % buckets
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % buckets


@dataclass(slots=True)
class PairTally:
    """Counts and per-score paired sums of a comparison; small (one entry per score) and mergeable.

    Per side (index 0 baseline, 1 candidate): ``keys`` rows read, ``unpaired`` keys the other
    side lacks, ``failed`` paired keys whose row failed on that side (left out of every
    score), ``unkeyed`` failed rows whose item could not be read for the key,
    ``missing_key`` ok rows without the key field, ``duplicates`` keys seen twice.
    """

    scores: list[PairedSums]
    nan_excluded: list[int]
    paired: int = 0
    keys: list[int] = field(default_factory=lambda: [0, 0])
    unpaired: list[int] = field(default_factory=lambda: [0, 0])
    failed: list[int] = field(default_factory=lambda: [0, 0])
    unkeyed: list[int] = field(default_factory=lambda: [0, 0])
    missing_key: list[int] = field(default_factory=lambda: [0, 0])
    missing_example: list[int | None] = field(default_factory=lambda: [None, None])
    duplicates: list[int] = field(default_factory=lambda: [0, 0])
    duplicate_example: list[list[Any] | None] = field(default_factory=lambda: [None, None])

    @classmethod
    def empty(cls, n_scores: int) -> PairTally:
        """A tally for ``n_scores`` compared scores."""
        return cls([PairedSums() for _ in range(n_scores)], [0] * n_scores)

    def add_unkeyed(self, side: int, row_index: int, ok: bool) -> None:
        """A row whose key could not be read: a failed row's raw text, or an ok row without the field."""
        if not ok:
            self.unkeyed[side] += 1
            return
        self.missing_key[side] += 1
        self._keep_missing(side, row_index)

    def _keep_missing(self, side: int, row_index: int) -> None:
        current = self.missing_example[side]
        self.missing_example[side] = row_index if current is None else min(current, row_index)

    def keep_duplicate(self, side: int, example: list[Any]) -> None:
        """Keep the least ``[key text, row, row]`` example of a duplicated key (the count is kept by the caller)."""
        current = self.duplicate_example[side]
        if current is None or example < current:
            self.duplicate_example[side] = example

    @staticmethod
    def merge(parts: Iterable[PairTally]) -> PairTally:
        """Combine partial tallies; the result does not depend on their order (examples are the least)."""
        items = list(parts)
        if not items:
            return PairTally.empty(0)
        merged = PairTally.empty(len(items[0].scores))
        for part in items:
            merged.paired += part.paired
            for name in ("keys", "unpaired", "failed", "unkeyed", "missing_key", "duplicates"):
                mine, theirs = getattr(merged, name), getattr(part, name)
                for side in (BASELINE, CANDIDATE):
                    mine[side] += theirs[side]
            for side in (BASELINE, CANDIDATE):
                missing, duplicate = part.missing_example[side], part.duplicate_example[side]
                if missing is not None:
                    merged._keep_missing(side, missing)
                if duplicate is not None:
                    merged.keep_duplicate(side, duplicate)
            merged.nan_excluded = [a + b for a, b in zip(merged.nan_excluded, part.nan_excluded, strict=True)]
        merged.scores = [PairedSums.merge(column) for column in zip(*(p.scores for p in items), strict=True)]
        return merged

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the Beam job writes it; the driver reads it back with ``from_dict``)."""
        data = dataclasses.asdict(self)
        data["scores"] = [dataclasses.asdict(s) for s in self.scores]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PairTally:
        """Inverse of ``to_dict``."""
        return cls(**{**data, "scores": [PairedSums(**s) for s in data["scores"]]})
