"""SpreadRows hands every row on exactly once, whatever the batch boundaries."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from transforms.spread import BATCH_ROWS, SpreadRows, _EvenBatches


def test_every_row_comes_out_once_across_partial_batches() -> None:
    rows = [{"row_index": index} for index in range(3 * BATCH_ROWS + 5)]  # three full batches and a short one
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        spread = pipeline | beam.Create(rows, reshuffle=False) | SpreadRows() | beam.Map(lambda row: row["row_index"])
        assert_that(spread, equal_to(list(range(len(rows)))))


def test_an_empty_input_gives_no_rows() -> None:
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        assert_that(pipeline | beam.Create([]) | SpreadRows(), equal_to([]))


def _assert_batch_sizes(rows: int, expected: list[int]) -> None:
    """One bundle of ``rows`` rows makes batches of ``expected`` sizes."""
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        one_bundle = pipeline | beam.Create([rows], reshuffle=False) | beam.FlatMap(lambda n: list(range(n)))
        assert_that(one_bundle | beam.ParDo(_EvenBatches()) | beam.Map(len), equal_to(expected))


def test_a_bundles_last_rows_are_split_evenly_so_no_worker_gets_every_short_batch() -> None:
    # One file of 250 rows: 64, 64, 61, 61 (not 64, 64, 64, 58, whose short batch is always 4th of the bundle).
    _assert_batch_sizes(4 * BATCH_ROWS - 6, [BATCH_ROWS, BATCH_ROWS, BATCH_ROWS - 3, BATCH_ROWS - 3])
    _assert_batch_sizes(BATCH_ROWS - 4, [BATCH_ROWS - 4])  # a small input stays one batch
    _assert_batch_sizes(2 * BATCH_ROWS, [BATCH_ROWS, BATCH_ROWS])
