"""``--decide``'s driver-side reads: each side's rows/ folded to one record per row, the paired differences in order.

After each wave the driver reads the candidate's ``rows/`` (the wave's outputs were just
published) and pairs them with the baseline's by ``row_index``, the pairing ``pipeline.compare``
uses by default: scores pair the rows that are ok on both sides (finite values), ``ok_rate``
(1 ok, 0 failed) every row present on both sides that neither skipped. With
``params.repeats`` a row's samples fold first: ok when any sample is, skipped when all are,
each score the mean over the ok samples' finite values. Only the columns needed are read.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beameval.compare.policy import OK_RATE
from beameval.core.errors import EvaluatorError
from pipeline.results import write_file_atomically

__all__ = ["Side", "add_order_columns", "paired_differences", "read_side", "skipped_in_waves"]


@dataclass(frozen=True)
class Side:
    """One run's rows, one per ``row_index`` (sorted): ok, skipped, each score (NaN where not usable), the item."""

    row_index: np.ndarray
    ok: np.ndarray
    skipped: np.ndarray
    scores: dict[str, np.ndarray]
    items: list[str | None] | None = None


def _shards(directory: str) -> list[str]:
    pattern = FileSystems.join(directory, "rows", "*.parquet")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def read_side(directory: str, names: list[str], with_items: bool = False) -> Side:
    """``directory``'s rows/ folded per row (see the module docstring).

    Raises:
        EvaluatorError: rows/ is missing or lacks a score column.
    """
    shards = _shards(directory)
    if not shards:
        raise EvaluatorError(f"{directory!r} has no rows/*.parquet: it is not a completed run's output directory.")
    wanted = ["row_index", "status", *names, *(["item"] if with_items else [])]
    tables = []
    for path in shards:
        with FileSystems.open(path) as handle:
            table = pq.read_table(io.BytesIO(handle.read()))
        missing = [name for name in wanted if name not in table.column_names]
        if missing:
            raise EvaluatorError(f"{path} has no column {missing[0]!r}: the runs do not score the same things.")
        tables.append(table.select(wanted))
    table = pa.concat_tables(tables)
    ok = pc.equal(table["status"], "ok")
    columns = {
        "row_index": table["row_index"],
        "ok": ok,
        "skipped": pc.equal(table["status"], "skipped"),
    }
    for position, name in enumerate(names):
        values = pc.cast(table[name], pa.float64())
        usable = pc.and_(ok, pc.is_finite(values).fill_null(False))
        columns[f"s{position}"] = pc.if_else(usable, values, pa.scalar(None, pa.float64()))
    if with_items:
        columns["item"] = table["item"]
    aggregations = [("ok", "any"), ("skipped", "all"), *((f"s{i}", "mean") for i in range(len(names)))]
    if with_items:
        aggregations.append(("item", "first"))
    folded = pa.table(columns).group_by("row_index", use_threads=False).aggregate(aggregations).sort_by("row_index")
    scores = {
        name: np.asarray(folded[f"s{i}_mean"].fill_null(np.nan).to_numpy(), dtype=np.float64)
        for i, name in enumerate(names)
    }
    return Side(
        np.asarray(folded["row_index"].to_numpy(), dtype=np.int64),
        np.asarray(folded["ok_any"].to_numpy(), dtype=bool),
        np.asarray(folded["skipped_all"].to_numpy(), dtype=bool),
        scores,
        folded["item_first"].to_pylist() if with_items else None,
    )


def paired_differences(
    baseline: Side, candidate: Side, order: dict[int, int], evaluated: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per score (and ``ok_rate``), the pairs among the first ``evaluated`` rows, in order: their rows and d.

    Returns:
        ``name -> (row_index, candidate − baseline)``, both in the evaluation order.

    Args:
        baseline: the baseline's rows.
        candidate: the candidate's rows.
        order: ``row_index`` -> its position in the evaluation order.
        evaluated: rows of the order evaluated so far.
    """
    common, b_at, c_at = np.intersect1d(baseline.row_index, candidate.row_index, return_indices=True)
    positions = np.array([order.get(int(r), -1) for r in common], dtype=np.int64)
    keep = (positions >= 0) & (positions < evaluated)
    by_order = np.argsort(positions[keep], kind="stable")
    b_at, c_at = b_at[keep][by_order], c_at[keep][by_order]
    rows = candidate.row_index[c_at]
    sent = ~baseline.skipped[b_at] & ~candidate.skipped[c_at]
    ok_d = candidate.ok[c_at][sent].astype(np.float64) - baseline.ok[b_at][sent].astype(np.float64)
    result = {OK_RATE: (rows[sent], ok_d)}
    for name, values in candidate.scores.items():
        d = values[c_at] - baseline.scores[name][b_at]
        finite = np.isfinite(d)
        result[name] = (rows[finite], d[finite])
    return result


def skipped_in_waves(side: Side, order: dict[int, int], evaluated: int) -> int:
    """Rows of the waves so far that were skipped all the same: a budget (or quota store) stopped them."""
    positions = np.array([order.get(int(r), -1) for r in side.row_index], dtype=np.int64)
    return int((side.skipped & (positions >= 0) & (positions < evaluated)).sum())


def add_order_columns(directory: str, order: dict[int, int], decided_message: str) -> None:
    """Add ``eval_order`` (the row's position in the order) and ``skip_reason`` to every rows/ shard.

    ``skip_reason`` is ``decided`` for the rows the decision left unsent, ``budget`` for rows a
    budget stopped, null for rows evaluated. Each shard is replaced whole (atomically where
    the file system allows).
    """
    for path in _shards(directory):
        with FileSystems.open(path) as handle:
            table = pq.read_table(io.BytesIO(handle.read()))
        positions = [order.get(int(r)) for r in table["row_index"].to_pylist()]
        statuses, errors = table["status"].to_pylist(), table["error"].to_pylist()
        reasons = [
            None if status != "skipped" else "decided" if (error or "").startswith(decided_message) else "budget"
            for status, error in zip(statuses, errors, strict=True)
        ]
        for name, column in (("eval_order", pa.array(positions, pa.int64())), ("skip_reason", pa.array(reasons))):
            if name in table.column_names:
                table = table.drop_columns([name])
            table = table.append_column(name, column)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        write_file_atomically(path, sink.getvalue().to_pybytes())
