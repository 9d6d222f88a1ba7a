"""The column-by-column rows/ table holds exactly what the row-by-row records held."""

import math

import pyarrow as pa

from beameval.core.records import InferenceInfo, RowFailure, ScoredRow
from transforms.write import row_columns, row_record, rows_schema


def test_row_columns_equal_the_row_records_for_every_kind_of_field() -> None:
    schema = rows_schema(["m.score", "m.other"], ["judge.label"], ["id", "judge.reply"])
    rows = [
        ScoredRow(0, '{"q": "a"}', "a", {"m.score": 1.0, "m.other": 0.5}, labels={"judge.label": "good"}),
        ScoredRow(
            1,
            '{"q": "b"}',
            None,
            {"m.score": math.nan, "m.other": math.nan},
            failure=RowFailure("scoring", ["metric 'm': boom", "second"], metric="m"),
            inference=InferenceInfo(0.25, 2, 200, 11, 7, "abc", False, '{"messages": []}'),
            notes=["the row's text was cleaned", "another"],
            sample_index=3,
            details={"id": "row-b", "judge.reply": "verdict: bad"},
        ),
        ScoredRow(2, "{}", "c", {"m.score": 0.0}, inference=InferenceInfo(cached=True), details={"id": None}),
        ScoredRow(3, "{}", None, {}, failure=RowFailure("sample_generation", ["over budget"], skipped=True)),
    ]
    columns = row_columns(rows, schema, ["judge.label"]).to_pylist()
    records = pa.Table.from_pylist([row_record(row, ["judge.label"]) for row in rows], schema=schema).to_pylist()
    assert len(columns) == 4 and columns[3]["status"] == "skipped" and columns[1]["request"] == '{"messages": []}'
    for by_column, by_row in zip(columns, records, strict=True):
        assert by_column.keys() == by_row.keys()
        for name, value in by_row.items():
            if isinstance(value, float) and math.isnan(value):
                assert math.isnan(by_column[name]), name
            else:
                assert by_column[name] == value, name
    assert columns[1]["latency_ms"] == 250.0 and columns[1]["error"] == "metric 'm': boom; second"
    assert columns[1]["notes"] == "the row's text was cleaned; another" and columns[1]["judge.reply"] == "verdict: bad"
    assert columns[2]["m.other"] is None and columns[2]["cached"] is True and columns[0]["judge.label"] == "good"
