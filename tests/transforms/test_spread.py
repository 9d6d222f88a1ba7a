"""SpreadRows hands every row on exactly once, whatever the batch boundaries."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from transforms.spread import BATCH_ROWS, SpreadRows


def test_every_row_comes_out_once_across_partial_batches() -> None:
    rows = [{"row_index": index} for index in range(3 * BATCH_ROWS + 5)]  # three full batches and a short one
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        spread = pipeline | beam.Create(rows, reshuffle=False) | SpreadRows() | beam.Map(lambda row: row["row_index"])
        assert_that(spread, equal_to(list(range(len(rows)))))


def test_an_empty_input_gives_no_rows() -> None:
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        assert_that(pipeline | beam.Create([]) | SpreadRows(), equal_to([]))
