"""SpreadRows: redistribute rows over every worker before the requests, in batches.

One dataset file is read by one worker, but each worker process has its own
``parallelism`` requests in flight, so rows are reshuffled before ``GenerateSamples``.
They cross the shuffle ``BATCH_ROWS`` at a time: a row-by-row ``Reshuffle`` decoded and
restored every row on its own, about a fifth of a worker's bundle-thread time in a py-spy
profile of an online run, and that thread shares the GIL with the one that reads replies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import apache_beam as beam

__all__ = ["BATCH_ROWS", "SpreadRows"]

#: Rows per shuffled element: small next to any worker's share of a dataset worth spreading.
BATCH_ROWS = 64

T = TypeVar("T")


class SpreadRows(beam.PTransform):
    """Rows in, the same rows out, each exactly once, spread over the workers in batches of ``BATCH_ROWS``."""

    def expand(self, rows: beam.PCollection[T]) -> beam.PCollection[T]:
        return (
            rows
            | "Batch" >> beam.BatchElements(min_batch_size=BATCH_ROWS, max_batch_size=BATCH_ROWS)
            | "Shuffle" >> beam.Reshuffle()
            | "Unbatch" >> beam.FlatMap(_each)
        )


def _each(batch: list[T]) -> Iterator[T]:
    yield from batch
