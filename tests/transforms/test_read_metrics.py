"""ReadRows counts the rows it reads in the ``evaluator/rows_read`` Beam counter."""

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from transforms import NAMESPACE
from transforms.read import ReadRows, list_dataset_files


def test_rows_read_counter_counts_every_row_once_and_respects_limit(write_parquet, write_jsonl, tmp_path):
    write_parquet([{"q": str(i)} for i in range(70)], "a.parquet", row_group_size=16)
    write_jsonl([{"q": str(i)} for i in range(30)], "b.jsonl")
    paths = list_dataset_files(str(tmp_path / "*"))
    for limit, expected in ((None, 100), (50, 50)):
        pipeline = beam.Pipeline(runner=FnApiRunner())
        _ = pipeline | ReadRows(paths, "auto", limit)
        result = pipeline.run()
        result.wait_until_finish()
        counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name("rows_read"))
        assert sum(c.committed for c in counters["counters"]) == expected
