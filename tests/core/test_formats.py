import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beameval.core.errors import DatasetError
from beameval.core.formats import count_records, detect_format, iter_records, parquet_row_group_sizes


def records(data: bytes, fmt: str, path: str = "d"):
    return list(iter_records(io.BytesIO(data), path, fmt))


def test_detect_format_by_extension():
    assert detect_format("a/b.JSONL", "auto") == "jsonl"
    assert detect_format("b.json.gz", "auto") == "jsonl"
    assert detect_format("b.parquet", "auto") == "parquet"
    assert detect_format("b.txt", "csv") == "csv"
    with pytest.raises(DatasetError, match="set dataset.format"):
        detect_format("b.txt", "auto")


def test_jsonl_keeps_types_and_reports_bad_lines_in_place():
    data = b'{"a": 1, "d": "2024-01-01"}\n\nnot json\n[1, 2]\n{"a": "\xff"}\n\xff\xfe\n'
    got = records(data, "jsonl", "f.jsonl")
    assert got[0] == ({"a": 1, "d": "2024-01-01"}, None, None)
    assert got[1][0] is None and got[1][1] == "not json" and "f.jsonl line 3 is not valid JSON" in got[1][2]
    assert "line 4 is a JSON list" in got[2][2]
    assert got[3][0] == {"a": "\ufffd"} or got[3][2] is not None
    assert "line 6 is not valid UTF-8" in got[4][2]
    assert count_records(io.BytesIO(data), "f", "jsonl") == 5


@pytest.mark.parametrize(
    "data",
    [
        b'\xef\xbb\xbf{"a": 1}\r\n \t\r\n{"a": 2}\n\n[3]\n\xff\n{"a": 4}',  # BOM, CRLF, blank lines, no final newline
        b'\n\n \t[{"a": 1}, 2,\n {"a": 3}]\n',  # a JSON array over two lines, after blank lines
        b"",
        b"\n \n",
    ],
    ids=["jsonl", "array", "empty", "blank"],
)
def test_jsonl_count_without_parsing_equals_the_records_read(data):
    assert count_records(io.BytesIO(data), "f", "jsonl") == len(records(data, "jsonl"))


def test_json_array_file():
    assert records(b' [{"a": 1}, {"a": 2}]', "jsonl") == [({"a": 1}, None, None), ({"a": 2}, None, None)]


def test_csv_keeps_strings_and_reports_ragged_rows():
    data = b'q,a\n"x, y",1\nz\n\nw,2\n'
    got = records(data, "csv", "f.csv")
    assert got[0] == ({"q": "x, y", "a": "1"}, None, None)
    assert got[1][0] is None and "f.csv line 3 has 1 fields but the header has 2" in got[1][2]
    assert got[2] == ({"q": "w", "a": "2"}, None, None)


def test_parquet_row_groups():
    buffer = io.BytesIO()
    pq.write_table(pa.table({"a": list(range(10))}), buffer, row_group_size=4)
    assert parquet_row_group_sizes(io.BytesIO(buffer.getvalue())) == [4, 4, 2]
