"""Joining one hash bucket of both runs' rows by key, in Arrow: pairs, counts, per-score sums and flips.

A side table (``side_schema``) holds one record per row and sample: ``key``, ``sample_index``,
``ok``, ``row_index``, one float column per compared score (``s0``, ``s1``, …; NaN where
missing), ``output_text``, ``item``, ``skipped`` (the row was never sent: a budget stopped
the run) and one column per ``group_by`` field (``g0``, ``g1``, …: the row's value there as
canonical JSON). Per side, a key with two records of the same
``sample_index`` is a duplicate (counted, with an example, and left out); with repeats a key's
samples fold into one row: ok when any sample is, each score the mean over the ok samples'
finite values, the output of its first ok sample. The two sides then meet in one full outer
hash join (Arrow's, in C++), and the paired differences are summed with numpy: a bucket of
tens of thousands of rows costs milliseconds, not a Python loop per row.

Besides the scores, which pair only rows ok on both sides, the bucket sums the implicit
``ok_rate`` (1 ok, 0 failed) over every key present on both sides that neither side skipped,
and, per group value, the same sums restricted to the group: all of it small and mergeable.
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

__all__ = ["NULL_GROUP", "join_bucket", "side_schema"]

#: The group of a row whose field is missing or null (``beameval.stats.breakdown``'s rule).
NULL_GROUP = "null"


def side_schema(int_keys: bool, n_scores: int, n_groups: int = 0) -> pa.Schema:
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
            pa.field("skipped", pa.bool_()),
            *(pa.field(f"g{j}", pa.string()) for j in range(n_groups)),
        ]
    )


def join_bucket(
    baseline: pa.Table, candidate: pa.Table, names: list[str], n_groups: int = 0
) -> tuple[PairTally, list[dict[str, Any]]]:
    """Join one bucket's rows by key.

    Args:
        baseline: the baseline's side table for the bucket (may be empty).
        candidate: the candidate's.
        names: the compared scores, in the order of the ``s0``, ``s1``, … columns.
        n_groups: the ``group_by`` fields, in the order of the ``g0``, ``g1``, … columns.

    Returns:
        The bucket's tally (counts, per-score and ``ok_rate`` paired sums, per group too) and
        the flips-file records of the pairs whose scores changed.
    """
    tally = PairTally.empty(len(names))
    sides = [
        _fold(_dedupe(table, side, tally), len(names), n_groups)
        for side, table in ((BASELINE, baseline), (CANDIDATE, candidate))
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
    sent = pc.and_(both, pc.invert(pc.or_(joined["b.skipped"].fill_null(False), joined["c.skipped"].fill_null(False))))
    answered = joined.filter(sent.fill_null(False))  # the ok_rate pairs: present on both sides, sent on both
    paired = joined.filter(pc.and_(both, pc.and_(b_ok, c_ok)).fill_null(False))
    tally.paired += paired.num_rows
    ok_b, ok_c = (np.asarray(answered[f"{tag}.ok"].to_numpy(), dtype=np.float64) for tag in "bc")
    tally.ok_rate = PairedSums.of_arrays(ok_b, ok_c)
    diffs = [_differences(paired, position) for position in range(len(names))]
    changed = np.zeros(paired.num_rows, dtype=bool)
    for position, (b, c, finite) in enumerate(diffs):
        tally.nan_excluded[position] += int((~finite).sum())
        tally.scores[position] = PairedSums.of_arrays(b[finite], c[finite])
        changed |= finite & (c != b)
    for j in range(n_groups):
        _group_sums(tally, j, _group_values(paired, j), diffs, _group_values(answered, j), (ok_b, ok_c))
    return tally, _flips(paired.take(np.flatnonzero(changed)), names)


def _differences(paired: pa.Table, position: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One score's baseline and candidate values over the pairs, and which differences are finite."""
    b = _floats(paired[f"b.s{position}"])
    c = _floats(paired[f"c.s{position}"])
    return b, c, np.isfinite(c - b)  # NaN or inf on either side propagates into the difference


def _group_values(table: pa.Table, j: int) -> np.ndarray:
    """The pairs' value of the j-th group field: the baseline's, or the candidate's where the baseline has none."""
    b, c = table[f"b.g{j}"], table[f"c.g{j}"]
    missing = pc.or_(pc.is_null(b), pc.equal(b, NULL_GROUP)).fill_null(True)
    return np.asarray(pc.if_else(missing, c, b).fill_null(NULL_GROUP).to_numpy(zero_copy_only=False), dtype=object)


def _group_sums(
    tally: PairTally,
    j: int,
    paired_values: np.ndarray,
    diffs: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    answered_values: np.ndarray,
    ok: tuple[np.ndarray, np.ndarray],
) -> None:
    """Add the j-th field's per-value sums (each score over its pairs, ok_rate over the answered pairs)."""
    for value in set(paired_values.tolist()) | set(answered_values.tolist()):
        scope = f"{j}:{value}"
        in_group = paired_values == value
        sums = [PairedSums.of_arrays(b[in_group & finite], c[in_group & finite]) for b, c, finite in diffs]
        answered = answered_values == value
        sums.append(PairedSums.of_arrays(ok[0][answered], ok[1][answered]))
        tally.add_group(scope, int(in_group.sum()), sums)


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


def _fold(table: pa.Table, n_scores: int, n_groups: int) -> pa.Table:
    """With repeats, one row per key: ok if any sample is, skipped if all are, means over ok finite values."""
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
    columns["skipped"] = table["skipped"].fill_null(False)
    for j in range(n_groups):
        columns[f"g{j}"] = table[f"g{j}"]
    ordered = pa.table(columns).sort_by([("key", "ascending"), ("ok", "descending"), ("sample_index", "ascending")])
    folded = ordered.group_by("key", use_threads=False).aggregate(
        [
            ("sample_index", "min"),
            ("ok", "any"),
            ("row_index", "min"),
            *((f"s{i}", "mean") for i in range(n_scores)),
            ("output_text", "first"),
            ("item", "first"),
            ("skipped", "all"),
            *((f"g{j}", "first") for j in range(n_groups)),
        ]
    )
    return folded.rename_columns(
        [
            "key",
            "sample_index",
            "ok",
            "row_index",
            *(f"s{i}" for i in range(n_scores)),
            "output_text",
            "item",
            "skipped",
            *(f"g{j}" for j in range(n_groups)),
        ]
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
