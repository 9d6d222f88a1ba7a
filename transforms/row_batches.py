"""Row batches: offline scoring moves rows through Beam as lists, not one element per row.

An offline run (no target, no metric endpoint) does a few microseconds of work per row,
and Beam's own cost of handing an element to each of the five stages after the read
(score, write, summarise, errors, progress) is of the same size. There the read emits
``RowBatch`` lists of up to ``OFFLINE_BATCH_ROWS`` rows and every stage after it takes a
batch as readily as a row: ``rows_of`` gives the rows of either. Each row is still scored,
guarded and written on its own; only the hand-over is shared.

The stages that call endpoints keep one row per element: a row waits there for its reply,
not for the rows beside it. Rows that cross a checkpoint together (batch mode's answers)
travel as ``PackedRows``: the local runner holds a ``Reshuffle``'s whole input, and
compressed it is a fraction of the rows' size.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any, TypeVar

import apache_beam as beam

from beameval.cache.entry import pack_bytes, unpack_bytes

__all__ = ["OFFLINE_BATCH_ROWS", "PackedRows", "RowBatch", "RowBatchCoder", "rows_of", "unpacked_batches"]

#: Rows per element on the offline path: Beam's per-element cost becomes negligible well
#: before this, and a batch is about 1/10 of a second of scoring, so progress stays smooth.
OFFLINE_BATCH_ROWS = 5000

R = TypeVar("R")


class RowBatch(list[Any]):
    """Rows (InputRow, GeneratedRow, ScoredRow; a join bucket's pairs) that travel as one Beam element."""


class PackedRows(list[Any]):
    """Rows that cross a shuffle as one element, pickled whole and compressed (rows of one run repeat most bytes).

    The compressed form is made once and kept: Beam encodes an element again to estimate
    its size (the first ten of each PCollection and about ``10 ln n`` of ``n`` after), and a
    decoded pack starts with the bytes it came from, so those estimates copy bytes instead
    of pickling and compressing the rows again. Beam's elements are not changed once
    emitted, so the kept bytes stay the rows' (pack first, then emit).
    """

    __slots__ = ("_packed",)

    def __reduce__(self) -> tuple[Any, tuple[type, bytes]]:
        packed: bytes | None = getattr(self, "_packed", None)
        if packed is None:
            packed = self._packed = pack_bytes(pickle.dumps(list(self), pickle.HIGHEST_PROTOCOL))
        return _unpacked, (type(self), packed)


def _unpacked(cls: type[PackedRows], payload: bytes) -> PackedRows:
    rows = cls(pickle.loads(unpack_bytes(payload)))  # noqa: S301 - this run's own rows
    rows._packed = payload
    return rows


def unpacked_batches(element: Any) -> Any:
    """``PackedRows`` -> one ``RowBatch`` of its rows for scoring; any other element as it is."""
    return RowBatch(element) if isinstance(element, PackedRows) else element


def rows_of(element: R | list[R]) -> Sequence[R]:
    """The rows of one element: a batch's rows, or the one row."""
    return element if isinstance(element, list) else (element,)


class RowBatchCoder(beam.coders.Coder):  # type: ignore[misc]  # Beam is untyped
    """Pickles a batch, and estimates its size from its first row.

    Beam measures the size of sampled elements of every PCollection (for its metrics) by
    encoding them, and samples the first ten and about 10/n after: with a few hundred
    batches that is pickling a fifth of the run's rows once more for each PCollection of
    batches. The estimate here pickles one row and multiplies.
    """

    def encode(self, value: RowBatch) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> RowBatch:
        batch: RowBatch = pickle.loads(encoded)
        return batch

    def estimate_size(self, value: RowBatch) -> int:
        if not value:
            return 1
        return len(value) * len(pickle.dumps(value[0], pickle.HIGHEST_PROTOCOL))

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self) -> type:
        return RowBatch


beam.coders.registry.register_coder(RowBatch, RowBatchCoder)
