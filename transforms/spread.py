"""SpreadRows: redistribute rows over every worker before the requests, in batches.

One dataset file is read by one worker, but each worker process has its own
``parallelism`` requests in flight, so rows are reshuffled before ``GenerateSamples``.
They cross the shuffle ``BATCH_ROWS`` at a time: a row-by-row ``Reshuffle`` decoded and
restored every row on its own, about a fifth of a worker's bundle-thread time in a py-spy
profile of an online run, and that thread shares the GIL with the one that reads replies.

A bundle's rows are cut into batches of ``BATCH_ROWS`` except its last two, which share
what is left evenly (250 rows: 64, 64, 61, 61; not 64, 64, 64, 58). The local runner hands
shuffled batches to its W workers in turn, and with every short batch in the same place of
each bundle, 8 files of 250 rows gave one of 2 workers every short batch: 976 rows against
1,024, which ended a 2-process run at 200 ms three quarters of a round trip later.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import apache_beam as beam
from apache_beam.utils.windowed_value import WindowedValue

from transforms.async_calls import in_global_window

__all__ = ["BATCH_ROWS", "SpreadRows"]

#: Rows per shuffled element: small next to any worker's share of a dataset worth spreading.
BATCH_ROWS = 64

T = TypeVar("T")


class SpreadRows(beam.PTransform):
    """Rows in, the same rows out, each exactly once, spread over the workers in batches of ``BATCH_ROWS``."""

    def expand(self, rows: beam.PCollection[T]) -> beam.PCollection[T]:
        return (
            rows
            | "Batch" >> beam.ParDo(_EvenBatches())
            | "Shuffle" >> beam.Reshuffle()
            | "Unbatch" >> beam.FlatMap(_each)
        )


class _EvenBatches(beam.DoFn):
    """Batches of ``BATCH_ROWS`` rows; the bundle's last two split what is left evenly (rows are globally windowed)."""

    def start_bundle(self) -> None:
        self._rows: list[Any] = []

    def process(self, row: Any) -> Iterator[list[Any]]:
        self._rows.append(row)
        if len(self._rows) == 2 * BATCH_ROWS:  # keep at least a batch back: the bundle may end next
            yield self._rows[:BATCH_ROWS]
            self._rows = self._rows[BATCH_ROWS:]

    def finish_bundle(self) -> Iterator[WindowedValue]:
        rows, self._rows = self._rows, []
        if len(rows) > BATCH_ROWS:
            half = (len(rows) + 1) // 2
            yield in_global_window(rows[:half])
            rows = rows[half:]
        if rows:
            yield in_global_window(rows)


def _each(batch: list[T]) -> Iterator[T]:
    yield from batch
