"""PairRuns: read two runs' ``rows/``, join them by key, and tally the paired differences per score.

Both sides are read from Parquet on any Beam file system and keyed (``row_index`` or a field
of the item). The join is a bucketed hash join on one GroupByKey (what CoGroupByKey does,
with far fewer elements): each side's rows go, as Arrow tables, to one of ``buckets`` hash
buckets of their key, and each bucket's tables from both sides meet in one group, where
``beameval.compare.join`` joins them by key in Arrow. The number of buckets grows with the row
count, so a group holds about ``ROWS_PER_BUCKET`` rows per side whatever the size of the
runs: no worker holds a side in memory, and a 10-million-row join costs a few thousand
shuffled elements, not 20 million. Each bundle folds its buckets into one small
``PairTally`` (per-score paired sums, the ``ok_rate`` sums, and both per ``group_by`` value)
that a CombineFn merges; pairs whose scores changed go to a flips output, both outputs side by side.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from beameval.compare.join import join_bucket, side_schema
from beameval.compare.pairing import BASELINE, CANDIDATE, SIDES, PairTally, bucket_of, field_key
from beameval.config.statistics import field_path
from beameval.stats.breakdown import row_keys
from transforms import NAMESPACE
from transforms.async_calls import in_global_window

__all__ = ["ROWS_PER_BUCKET", "ROW_INDEX", "PairRuns", "RunRows", "bucket_count"]

#: The default key: the row's position in its dataset.
ROW_INDEX = "row_index"
_UNKEYED = "unkeyed"
_FLIPS = "flips"
_MISSING = object()
#: Rows per side a join bucket holds on average: what one group keeps in memory.
ROWS_PER_BUCKET = 20_000
#: Records a keying DoFn buffers before sending its buckets on (bounds its memory too).
_FLUSH_RECORDS = 50_000


def bucket_count(rows: int) -> int:
    """Join buckets for runs of ``rows`` rows (per side, samples included)."""
    return max(1, -(-rows // ROWS_PER_BUCKET))


class RunRows:
    """One side of the comparison: its ``rows/`` file pattern and whether it has ``sample_index`` (repeats)."""

    def __init__(self, pattern: str, has_sample_index: bool) -> None:
        self.pattern = pattern
        self.has_sample_index = has_sample_index


def lookup(item: Any, field: str) -> Any:
    """``item[field]``, else the dotted path (``meta.id``); ``_MISSING`` when absent."""
    if isinstance(item, dict) and field in item:
        return item[field]
    current = item
    for part in field.split("."):
        if not isinstance(current, dict) or part not in current:
            return _MISSING
        current = current[part]
    return current


class _KeyRows(beam.DoFn):
    """One side's Arrow batches -> ``(bucket, (side, Arrow IPC bytes of a side table))``; unkeyable rows tagged."""

    def __init__(
        self,
        side: int,
        key: str,
        score_names: list[str],
        keep_item: bool,
        has_sample_index: bool,
        buckets: int,
        group_by: list[str],
    ) -> None:
        self._side = side
        self._key = key
        self._names = score_names
        self._keep_item = keep_item
        self._has_sample_index = has_sample_index
        self._buckets = buckets
        self._groups = [field_path(path) for path in group_by]
        self._schema = side_schema(key == ROW_INDEX, len(score_names), len(group_by))

    def setup(self) -> None:
        self._read = Metrics.counter(NAMESPACE, f"compare_{SIDES[self._side]}_rows")

    def start_bundle(self) -> None:
        self._pending: dict[int, list[pa.Table]] = {}
        self._count = 0

    def process(self, table: pa.Table) -> Iterator[Any]:
        n = table.num_rows
        self._read.inc(n)
        ok = pc.equal(table["status"], "ok").fill_null(False)
        if self._key == ROW_INDEX:
            keys: Any = table["row_index"]
            buckets = np.asarray(keys.to_numpy()) % self._buckets
        else:
            found = [self._field_key(item) for item in table["item"].to_pylist()]
            present = [key for key in found if key is not None]
            if len(present) < len(found):
                rows, oks = table["row_index"].to_pylist(), ok.to_pylist()
                for i, key in enumerate(found):
                    if key is None:
                        yield beam.pvalue.TaggedOutput(_UNKEYED, (self._side, rows[i], oks[i]))
                keep = pa.array([key is not None for key in found])
                table, ok = table.filter(keep), ok.filter(keep)
            keys = pa.array(present, pa.string())
            buckets = np.fromiter(
                (bucket_of(key, self._buckets) for key in present), dtype=np.int64, count=len(present)
            )
        n = table.num_rows
        if n == 0:
            return
        sample = table["sample_index"].fill_null(0) if self._has_sample_index else pa.array(np.zeros(n, np.int64))
        item = table["item"] if self._keep_item else pa.nulls(n, pa.string())
        scores = [table[name].cast(pa.float64()).fill_null(math.nan) for name in self._names]
        skipped = pc.equal(table["status"], "skipped").fill_null(False)
        columns = [
            keys,
            sample,
            ok,
            table["row_index"],
            *scores,
            table["output_text"],
            item,
            skipped,
            *self._scopes(table),
        ]
        side = pa.Table.from_arrays(columns, schema=self._schema)
        order = np.argsort(buckets, kind="stable")
        sorted_buckets = buckets[order]
        side = side.take(order)
        starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]])
        for position, start in enumerate(starts):
            stop = starts[position + 1] if position + 1 < len(starts) else n
            self._pending.setdefault(int(sorted_buckets[start]), []).append(side.slice(start, stop - start))
        self._count += n
        if self._count >= _FLUSH_RECORDS:
            yield from self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for element in self._flush():
            yield in_global_window(element)

    def _flush(self) -> Iterator[tuple[int, tuple[int, bytes]]]:
        pending, self._pending, self._count = self._pending, {}, 0
        for bucket, parts in pending.items():
            yield bucket, (self._side, _to_ipc(pa.concat_tables(parts)))

    def _scopes(self, table: pa.Table) -> list[pa.Array]:
        """One column per ``group_by`` field: each row's value there as canonical JSON (the stats' rule)."""
        if not self._groups:
            return []
        values = [row_keys(text or "", self._groups, None)[0][1:] for text in table["item"].to_pylist()]
        return [pa.array([row[j].partition(":")[2] for row in values], pa.string()) for j in range(len(self._groups))]

    def _field_key(self, item_text: str | None) -> str | None:
        try:
            item = json.loads(item_text) if item_text else None
        except ValueError:  # a row that failed at input keeps its raw text
            return None
        value = lookup(item, self._key)
        return None if value is _MISSING else field_key(value)


def _to_ipc(table: pa.Table) -> bytes:
    """Arrow IPC bytes: a bucket crosses the shuffle as one bytes value (Beam's tuple coder is far slower)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


class _PairBuckets(beam.DoFn):
    """Join one bucket's side tables by key (``join_bucket``); fold into the bundle's tally; emit flips."""

    def __init__(self, score_names: list[str], int_keys: bool, n_groups: int) -> None:
        self._names = score_names
        self._n_groups = n_groups
        self._schema = side_schema(int_keys, len(score_names), n_groups)

    def setup(self) -> None:
        self._flips = Metrics.counter(NAMESPACE, "compare_flips")

    def start_bundle(self) -> None:
        self._tally = PairTally.empty(len(self._names))

    def process(self, group: tuple[int, Iterable[tuple[int, bytes]]]) -> Iterator[Any]:
        _, parts = group
        sides: tuple[list[pa.Table], list[pa.Table]] = ([], [])
        for side, data in parts:
            sides[side].append(_from_ipc(data))
        tables = [pa.concat_tables(found) if found else self._schema.empty_table() for found in sides]
        tally, flips = join_bucket(tables[BASELINE], tables[CANDIDATE], self._names, self._n_groups)
        self._tally = PairTally.merge([self._tally, tally])
        self._flips.inc(len(flips))
        for flip in flips:
            yield beam.pvalue.TaggedOutput(_FLIPS, json.dumps(flip, ensure_ascii=False, default=str))

    def finish_bundle(self) -> Iterator[WindowedValue]:
        yield in_global_window(self._tally)


class _TallyUnkeyed(beam.DoFn):
    """Count rows that could not be keyed, one tally per bundle."""

    def __init__(self, n_scores: int) -> None:
        self._n_scores = n_scores

    def start_bundle(self) -> None:
        self._tally = PairTally.empty(self._n_scores)

    def process(self, unkeyed: tuple[int, int, bool]) -> None:
        self._tally.add_unkeyed(*unkeyed)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        yield in_global_window(self._tally)


class _MergeTallies(beam.CombineFn):
    """Delegates to PairTally.merge; the accumulator is one small tally."""

    def __init__(self, n_scores: int) -> None:
        self._n_scores = n_scores

    def create_accumulator(self) -> PairTally:
        return PairTally.empty(self._n_scores)

    def add_input(self, accumulator: PairTally, tally: PairTally) -> PairTally:
        return PairTally.merge([accumulator, tally])

    def merge_accumulators(self, accumulators: Iterable[PairTally]) -> PairTally:
        return PairTally.merge(accumulators)

    def extract_output(self, accumulator: PairTally) -> dict[str, Any]:
        return accumulator.to_dict()


class PairRuns(beam.PTransform):
    """Both runs' rows -> ``{"tally": one PairTally dict, "flips": JSON lines of changed pairs}``.

    Args:
        baseline: the baseline's rows.
        candidate: the candidate's rows.
        key: ``row_index`` or a field (dotted path) of the item.
        score_names: the scores to compare (float columns of both sides).
        buckets: join buckets (``bucket_count`` of the larger side's rows).
        group_by: item fields (dotted paths) to sum per value as well.
    """

    def __init__(
        self,
        baseline: RunRows,
        candidate: RunRows,
        key: str,
        score_names: list[str],
        buckets: int,
        group_by: list[str] | None = None,
    ) -> None:
        super().__init__()
        self._sides = {BASELINE: baseline, CANDIDATE: candidate}
        self._key = key
        self._names = score_names
        self._buckets = buckets
        self._group_by = list(group_by or [])

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection[Any]]:
        keyed, unkeyed = [], []
        for side, rows in self._sides.items():
            name = SIDES[side].capitalize()
            columns = ["row_index", "status", "output_text", "item", *self._names]
            columns += ["sample_index"] if rows.has_sample_index else []
            # The baseline carries the item into the flips file; the candidate's would double the shuffle.
            key_fn = _KeyRows(
                side, self._key, self._names, side == BASELINE, rows.has_sample_index, self._buckets, self._group_by
            )
            split = (
                pbegin
                | f"Read{name}" >> beam.io.ReadFromParquetBatched(rows.pattern, columns=columns)
                | f"Key{name}" >> beam.ParDo(key_fn).with_outputs(_UNKEYED, main="keyed")
            )
            keyed.append(split.keyed)
            unkeyed.append(split[_UNKEYED])
        paired = (
            keyed
            | "BothSides" >> beam.Flatten()
            | "JoinBuckets" >> beam.GroupByKey()
            | "Pair"
            >> beam.ParDo(_PairBuckets(self._names, self._key == ROW_INDEX, len(self._group_by))).with_outputs(
                _FLIPS, main="tallies"
            )
        )
        unkeyed_tallies = (
            unkeyed | "Unkeyed" >> beam.Flatten() | "CountUnkeyed" >> beam.ParDo(_TallyUnkeyed(len(self._names)))
        )
        merge = beam.CombineGlobally(_MergeTallies(len(self._names)))
        tally = (paired.tallies, unkeyed_tallies) | "Tallies" >> beam.Flatten() | "MergeTallies" >> merge
        return {"tally": tally, "flips": paired[_FLIPS]}
