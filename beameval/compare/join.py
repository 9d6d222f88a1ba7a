"""Joining one hash bucket of both runs' rows by key, in Arrow: pairs, counts, per-score sums and flips.

A side table (``side_schema``) holds one record per row and sample: ``key``, ``sample_index``,
``ok``, ``row_index``, one float column per compared score (``s0``, ``s1``, …; NaN where
missing), ``output_text`` and ``item``. Per side, a key with two records of the same
``sample_index`` is a duplicate (counted, with an example, and left out); with repeats a key's
samples fold into one row: ok when any sample is, each score the mean over the ok samples'
finite values, the output of its first ok sample. The two sides then meet in one full outer
hash join (Arrow's, in C++), and the paired differences are summed with numpy: a bucket of
tens of thousands of rows costs milliseconds, not a Python loop per row.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beameval.compare.paired import PairedSums
from beameval.compare.pairing import BASELINE, CANDIDATE, PairTally, key_text, key_value

__all__ = ["join_bucket", "side_schema"]


def side_schema(int_keys: bool, n_scores: int) -> pa.Schema:
    """The schema of a side table: integer keys for ``row_index``, JSON-text keys for an item field."""
    return pa.schema(
        [
            pa.field("key", pa.int64() if int_keys else pa.string()),
            pa.field("sample_index", pa.int64()),
            pa.field("ok", pa.bool_()),
            pa.field("row_index", pa.int64()),
            *(pa.field(f"s{i}", pa.float64()) for i in range(n_scores)),
            pa.field("output_text", pa.string()),
            pa.field("item", pa.string()),
        ]
    )


def join_bucket(baseline: pa.Table, candidate: pa.Table, names: list[str]) -> tuple[PairTally, list[dict[str, Any]]]:
    """Join one bucket's rows by key.

    Args:
        baseline: the baseline's side table for the bucket (may be empty).
        candidate: the candidate's.
        names: the compared scores, in the order of the ``s0``, ``s1``, … columns.

    Returns:
        The bucket's tally (counts and per-score paired sums) and the flips-file records of
        the pairs whose scores changed.
    """
    tally = PairTally.empty(len(names))
    sides = [
        _fold(_dedupe(table, side, tally), len(names)) for side, table in ((BASELINE, baseline), (CANDIDATE, candidate))
    ]
    prefixed = [table.drop_columns(["sample_index"]) for table in sides]
    prefixed = [
        table.rename_columns([name if name == "key" else f"{tag}.{name}" for name in table.column_names])
        for tag, table in zip("bc", prefixed, strict=True)
    ]
    joined = prefixed[0].join(prefixed[1], "key", join_type="full outer", use_threads=False)
    b_ok, c_ok = joined["b.ok"], joined["c.ok"]
    has_b, has_c = pc.is_valid(b_ok), pc.is_valid(c_ok)
    both = pc.and_(has_b, has_c)
    tally.unpaired[BASELINE] += _count(pc.and_not(has_b, has_c))
    tally.unpaired[CANDIDATE] += _count(pc.and_not(has_c, has_b))
    tally.failed[BASELINE] += _count(pc.and_not(both, b_ok.fill_null(True)))
    tally.failed[CANDIDATE] += _count(pc.and_not(both, c_ok.fill_null(True)))
    paired = joined.filter(pc.and_(both, pc.and_(b_ok, c_ok)).fill_null(False))
    tally.paired += paired.num_rows
    changed = np.zeros(paired.num_rows, dtype=bool)
    for position in range(len(names)):
        b = _floats(paired[f"b.s{position}"])
        c = _floats(paired[f"c.s{position}"])
        d = c - b
        finite = np.isfinite(d)  # NaN or inf on either side propagates into the difference
        tally.nan_excluded[position] += int((~finite).sum())
        tally.scores[position] = PairedSums.of_arrays(b[finite], c[finite])
        changed |= finite & (d != 0)
    return tally, _flips(paired.take(np.flatnonzero(changed)), names)


def _count(mask: pa.ChunkedArray) -> int:
    return int(pc.sum(mask.fill_null(False).cast(pa.int64())).as_py() or 0)


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.fill_null(math.nan).to_numpy(), dtype=np.float64)


def _dedupe(table: pa.Table, side: int, tally: PairTally) -> pa.Table:
    """Count the side's keys; drop (and count, with the least example) keys whose sample index repeats."""
    distinct = pc.count_distinct(table["key"]).as_py() or 0
    tally.keys[side] += distinct
    if distinct == table.num_rows:  # one record per key: nothing repeats
        return table
    grouped = table.group_by(["key", "sample_index"], use_threads=False).aggregate(
        [("row_index", "count"), ("row_index", "min"), ("row_index", "max")]
    )
    repeated = grouped.filter(pc.greater(grouped["row_index_count"], 1))
    if repeated.num_rows == 0:
        return table
    keys = pc.unique(repeated["key"])
    tally.duplicates[side] += len(keys)
    examples = zip(
        repeated["key"].to_pylist(),
        repeated["row_index_min"].to_pylist(),
        repeated["row_index_max"].to_pylist(),
        strict=True,
    )
    for key, first, second in examples:
        tally.keep_duplicate(side, [key_text(key), first, second])
    return table.filter(pc.invert(pc.is_in(table["key"], value_set=keys)))


def _fold(table: pa.Table, n_scores: int) -> pa.Table:
    """With repeats, one row per key: ok if any sample is, score means over ok finite values, first ok output."""
    if (pc.count_distinct(table["key"]).as_py() or 0) == table.num_rows:
        return table
    columns: dict[str, Any] = {"key": table["key"], "sample_index": table["sample_index"], "ok": table["ok"]}
    columns["row_index"] = table["row_index"]
    usable = pc.and_(table["ok"], pc.invert(pc.is_null(table["ok"])))
    for i in range(n_scores):
        values = table[f"s{i}"]
        columns[f"s{i}"] = pc.if_else(pc.and_(usable, pc.is_finite(values)), values, pa.scalar(None, pa.float64()))
    columns["output_text"] = table["output_text"]
    columns["item"] = table["item"]
    ordered = pa.table(columns).sort_by([("key", "ascending"), ("ok", "descending"), ("sample_index", "ascending")])
    folded = ordered.group_by("key", use_threads=False).aggregate(
        [
            ("sample_index", "min"),
            ("ok", "any"),
            ("row_index", "min"),
            *((f"s{i}", "mean") for i in range(n_scores)),
            ("output_text", "first"),
            ("item", "first"),
        ]
    )
    return folded.rename_columns(
        ["key", "sample_index", "ok", "row_index", *(f"s{i}" for i in range(n_scores)), "output_text", "item"]
    )


def _flips(changed: pa.Table, names: list[str]) -> list[dict[str, Any]]:
    """The flips-file records: key, which scores went down and up, both outputs and both score sets."""
    records = []
    for row in changed.to_pylist():
        base = [_finite(row[f"b.s{i}"]) for i in range(len(names))]
        cand = [_finite(row[f"c.s{i}"]) for i in range(len(names))]
        moved = [(name, b, c) for name, b, c in zip(names, base, cand, strict=True) if b is not None and c is not None]
        records.append(
            {
                "key": key_value(row["key"]),
                "regressed": [name for name, b, c in moved if c < b],
                "improved": [name for name, b, c in moved if c > b],
                "baseline_output": row["b.output_text"],
                "candidate_output": row["c.output_text"],
                "baseline_scores": dict(zip(names, base, strict=True)),
                "candidate_scores": dict(zip(names, cand, strict=True)),
                "baseline_row_index": row["b.row_index"],
                "candidate_row_index": row["c.row_index"],
                "item": _item(row["b.item"] if row["b.item"] is not None else row["c.item"]),
            }
        )
    return records


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _item(text: str | None) -> Any:
    """The row as JSON (a row that failed to parse keeps its raw text)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
