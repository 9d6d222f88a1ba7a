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
    ``ok_rate`` sums 1 (ok) / 0 (failed) over the keys on both sides that neither skipped;
    ``groups`` maps a group scope (``"<field position>:<value JSON>"``) to its per-score sums
    followed by its ``ok_rate`` sums, and ``group_paired`` to its rows ok on both sides.
    """

    scores: list[PairedSums]
    nan_excluded: list[int]
    ok_rate: PairedSums = field(default_factory=PairedSums)
    groups: dict[str, list[PairedSums]] = field(default_factory=dict)
    group_paired: dict[str, int] = field(default_factory=dict)
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

    def add_group(self, scope: str, paired: int, sums: list[PairedSums]) -> None:
        """Fold in one group's sums (scores then ok_rate) and paired rows."""
        current = self.groups.get(scope)
        self.groups[scope] = sums if current is None else [PairedSums.merge(p) for p in zip(current, sums, strict=True)]
        self.group_paired[scope] = self.group_paired.get(scope, 0) + paired

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
            for scope, sums in part.groups.items():
                merged.add_group(scope, part.group_paired.get(scope, 0), sums)
        merged.scores = [PairedSums.merge(column) for column in zip(*(p.scores for p in items), strict=True)]
        merged.ok_rate = PairedSums.merge(p.ok_rate for p in items)
        return merged

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the Beam job writes it; the driver reads it back with ``from_dict``)."""
        return dataclasses.asdict(self)  # nested sums become dicts too

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PairTally:
        """Inverse of ``to_dict``."""
        return cls(
            **{
                **data,
                "scores": [PairedSums(**s) for s in data["scores"]],
                "ok_rate": PairedSums(**data["ok_rate"]),
                "groups": {scope: [PairedSums(**s) for s in sums] for scope, sums in data["groups"].items()},
            }
        )
