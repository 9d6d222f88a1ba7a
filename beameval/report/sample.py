"""The report's bounded view of ``rows/``: a streaming, seeded row sample and the failure breakdown.

A report must open quickly at any run size, so it embeds at most ``budget`` rows (2,000
by default): every failed row first, then the rows a comparison flipped, then a seeded
uniform sample of the rest. When failures alone would fill the page, they get 80% of it
(a uniform sample of them) and the rest 20%, so working rows stay visible too. Rows
arrive as Arrow record batches (the caller reads Parquet, from any file system) and are
kept by reservoir sampling (Vitter's Algorithm L, which draws how many rows to *skip*),
so memory is three reservoirs whatever the row count, and only the rows that enter a
reservoir are ever turned into Python objects.

Failures are counted by (phase, metric, cause) over every ``errors/`` record, with the
number of distinct causes capped so a message that differs per row cannot grow the page.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["DEFAULT_BUDGET", "FailureBreakdown", "FailureGroup", "Reservoir", "RowSampler", "SampleInfo"]

DEFAULT_BUDGET = 2000
_OTHER = "(other causes)"


def _uniform(rng: random.Random) -> float:
    """A draw in (0, 1): Algorithm L takes its logarithm."""
    while True:
        u = rng.random()
        if u > 0.0:
            return u


class Reservoir:
    """A uniform sample of at most ``capacity`` items from a stream whose length is not known ahead.

    The caller offers a count of items and gets back which of them to keep and in which
    slot, then materialises only those (``put``); so a batch of 65,536 rows costs a few
    random draws, not 65,536 Python objects.

    Args:
        capacity: the sample size.
        rng: the seeded generator (shared, so one seed fixes the whole sample).
    """

    def __init__(self, capacity: int, rng: random.Random) -> None:
        self.capacity = max(0, capacity)
        self.items: list[Any] = []
        self.seen = 0
        self._rng = rng
        self._assigned = 0
        self._w = 0.0
        self._next: int | None = None

    def offer(self, n: int) -> list[tuple[int, int]]:
        """Offer the next ``n`` items; return ``(offset among them, slot)`` for each one to keep.

        A later pair may reuse a slot of an earlier one: put them in order.
        """
        start, end = self.seen, self.seen + n
        self.seen = end
        if self.capacity == 0:
            return []
        accepted: list[tuple[int, int]] = []
        i = start
        while i < end and self._assigned < self.capacity:
            accepted.append((i - start, self._assigned))
            self._assigned += 1
            if self._assigned == self.capacity:
                self._w = self._shrink(1.0)
                self._next = i + self._skip() + 1
            i += 1
        while self._next is not None and self._next < end:
            accepted.append((self._next - start, self._rng.randrange(self.capacity)))
            self._w = self._shrink(self._w)
            self._next += self._skip() + 1
        return accepted

    def put(self, slot: int, item: Any) -> None:
        """Store ``item`` in ``slot`` (returned by ``offer``)."""
        if slot == len(self.items):
            self.items.append(item)
        else:
            self.items[slot] = item

    def _shrink(self, w: float) -> float:
        return min(w * math.exp(math.log(_uniform(self._rng)) / self.capacity), 1.0 - 1e-16)

    def _skip(self) -> int:
        return math.floor(math.log(_uniform(self._rng)) / math.log(1.0 - self._w))


@dataclass(frozen=True)
class SampleInfo:
    """What the page says about the rows it embeds."""

    total_rows: int
    failed_rows: int
    flipped_rows: int
    kept_failed: int
    kept_flipped: int
    kept_random: int
    budget: int
    seed: int

    @property
    def kept(self) -> int:
        return self.kept_failed + self.kept_flipped + self.kept_random

    @property
    def complete(self) -> bool:
        """True when every row of the run is on the page."""
        return self.kept == self.total_rows


class RowSampler:
    """Keep a bounded, seeded sample of ``rows/`` record batches: failed, then flipped, then the rest.

    Args:
        budget: rows on the page at most.
        seed: fixes the sample (the same run and seed give the same page).
        priority_indices: ``row_index`` values of rows a comparison flipped.
        columns: when given, only these columns are kept per row (others are not materialised).
    """

    def __init__(
        self,
        budget: int = DEFAULT_BUDGET,
        seed: int = 0,
        priority_indices: Collection[int] = (),
        columns: Collection[str] | None = None,
    ) -> None:
        self.budget = max(0, budget)
        self.seed = seed
        self._rng = random.Random(seed)
        self._priority = pa.array(sorted(set(priority_indices)), type=pa.int64())
        self._tiers = [Reservoir(self.budget, self._rng) for _ in range(3)]  # failed, flipped, rest
        self._columns = None if columns is None else list(columns)

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Offer every row of ``batch`` (a ``rows/`` record batch)."""
        n = batch.num_rows
        if n == 0:
            return
        names = batch.schema.names
        if "status" in names:
            failed = pc.fill_null(pc.equal(batch.column("status"), "error"), False)
        else:
            failed = pa.array([False] * n)
        if len(self._priority) and "row_index" in names:
            flipped = pc.and_(pc.is_in(batch.column("row_index"), value_set=self._priority), pc.invert(failed))
        else:
            flipped = pa.array([False] * n)
        rest = pc.invert(pc.or_(failed, flipped))
        if self._columns is not None:
            keep = [c for c in self._columns if c in names]
            batch = batch.select(keep)
        for mask, reservoir in zip((failed, flipped, rest), self._tiers, strict=True):
            positions = pc.indices_nonzero(mask)
            accepted = reservoir.offer(len(positions))
            if not accepted:
                continue
            chosen = positions.take(pa.array([offset for offset, _ in accepted], type=pa.int64()))
            for (_, slot), record in zip(accepted, batch.take(chosen).to_pylist(), strict=True):
                reservoir.put(slot, record)

    def result(self) -> tuple[list[dict[str, Any]], SampleInfo]:
        """The kept rows (ordered by ``row_index``, ``sample_index``) and what they are."""
        failed, flipped, rest = self._tiers
        # The rest keeps a fifth of the budget (when it has the rows), so a run whose rows
        # nearly all failed still shows some that did not; unused shares pass down the tiers.
        reserve = min(len(rest.items), self.budget // 5)
        take_failed = min(len(failed.items), self.budget - reserve)
        take_flipped = min(len(flipped.items), self.budget - reserve - take_failed)
        take_rest = min(len(rest.items), self.budget - take_failed - take_flipped)
        kept: list[list[dict[str, Any]]] = []
        for reservoir, take in zip(self._tiers, (take_failed, take_flipped, take_rest), strict=True):
            items = reservoir.items
            # A reservoir's slots are not exchangeable early on; shrink it by a fresh uniform draw.
            kept.append(items if take == len(items) else self._rng.sample(items, take))
        info = SampleInfo(
            total_rows=failed.seen + flipped.seen + rest.seen,
            failed_rows=failed.seen,
            flipped_rows=flipped.seen,
            kept_failed=len(kept[0]),
            kept_flipped=len(kept[1]),
            kept_random=len(kept[2]),
            budget=self.budget,
            seed=self.seed,
        )
        rows = [row for tier in kept for row in tier]
        rows.sort(key=lambda r: (r.get("row_index") or 0, r.get("sample_index") or 0))
        return rows, info


@dataclass
class FailureGroup:
    """Failed rows sharing a phase, a metric and a cause; ``id`` links the group to its rows."""

    id: int
    phase: str
    metric: str | None
    cause: str
    count: int = 0


#: Row and line numbers differ per failure of the same cause (results.json's ``failures`` folds them too).
_NUMBERS = re.compile(r"\b(row|line) \d+\b")


def cause_of(message: Any) -> str:
    """A failure's cause for grouping: its first message, whitespace and row numbers folded, <= 160 characters."""
    text = re.sub(r"\s+", " ", str(message or "unknown cause")).strip()
    first = _NUMBERS.sub(r"\1 N", text.split("; ")[0])
    return first if len(first) <= 160 else first[:157] + "..."


@dataclass
class FailureBreakdown:
    """Failure counts by phase, by metric and by (phase, metric, cause), from ``errors/`` records.

    Args:
        max_causes: distinct groups kept; further causes are counted under "(other causes)".
    """

    max_causes: int = 40
    total: int = 0
    by_phase: Counter[str] = field(default_factory=Counter)
    by_metric: Counter[str] = field(default_factory=Counter)
    _groups: dict[tuple[str, str | None, str], FailureGroup] = field(default_factory=dict)

    def add(self, record: Mapping[str, Any]) -> int:
        """Count one failure (``phase``, ``metric``, ``error``); return its group's id."""
        phase = str(record.get("phase") or "unknown")
        metric = record.get("metric")
        metric = None if metric is None else str(metric)
        cause = cause_of(record.get("error"))
        key = (phase, metric, cause)
        if key not in self._groups and len(self._groups) >= self.max_causes:
            key = (phase, metric, _OTHER)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = FailureGroup(len(self._groups), phase, metric, key[2])
        group.count += 1
        self.total += 1
        self.by_phase[phase] += 1
        self.by_metric[metric or "(none)"] += 1
        return group.id

    @property
    def groups(self) -> list[FailureGroup]:
        """Every group, largest first."""
        return sorted(self._groups.values(), key=lambda g: (-g.count, g.id))

    @classmethod
    def from_rows(cls, rows: Iterable[dict[str, Any]]) -> FailureBreakdown:
        """A breakdown of the failed rows at hand, tagging each with ``failure`` (its group id).

        For pages built from rows alone (no ``errors/``): a row's ``phase`` and ``metric``
        are used when present.
        """
        breakdown = cls()
        for row in rows:
            if row.get("status") == "error":
                row["failure"] = breakdown.add(row)
        return breakdown
