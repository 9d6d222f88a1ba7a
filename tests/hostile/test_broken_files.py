"""Broken dataset files: a cut or corrupt gzip, duplicate column names, cells over the shared size limit."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import beameval.core.sanitize as sanitize
from beameval.core.errors import DatasetError
from beameval.core.formats import iter_records, open_checked_gzip
from transforms.read import _input_row

OFFLINE = [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}]


def _gzip_lines(count: int) -> bytes:
    text = "".join(json.dumps({"answer": f"a{i}", "output": f"a{i}"}) + "\n" for i in range(count))
    return gzip.compress(text.encode(), mtime=0)


def _read_all(data: bytes, path: str = "data.jsonl.gz") -> int:
    return sum(1 for _ in iter_records(open_checked_gzip(io.BytesIO(data), path), path, "jsonl"))


def test_a_complete_gzip_file_reads_every_row():
    assert _read_all(_gzip_lines(2000)) == 2000


def test_a_gzip_file_cut_mid_stream_is_an_error_naming_the_file():
    data = _gzip_lines(2000)
    with pytest.raises(
        DatasetError, match=r"data.jsonl.gz is cut short: the gzip stream ends before its end-of-stream"
    ):
        _read_all(data[: len(data) // 2])


def test_a_gzip_file_with_a_bad_crc_is_an_error_naming_the_file():
    data = bytearray(_gzip_lines(50))
    data[-8] ^= 0xFF  # the CRC32 in the trailer
    with pytest.raises(DatasetError, match=r"data.jsonl.gz is corrupt: its gzip CRC check failed"):
        _read_all(bytes(data))


@pytest.mark.slow
def test_a_truncated_jsonl_gz_fails_the_run_instead_of_reading_a_shorter_dataset(tmp_path: Path, run_eval):
    data = _gzip_lines(2000)
    path = tmp_path / "data.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    config = {"dataset": {"path": str(path)}, "params": {"ignore_request_failure": True}, "metrics": OFFLINE}
    result = run_eval(config)
    assert result.code != 0
    assert f"dataset file {path} is cut short" in result.stderr and "Traceback" not in result.stderr
    assert not (result.output / "results.json").exists()


def test_duplicate_csv_columns_are_an_error_naming_the_column(tmp_path: Path, run_eval):
    path = tmp_path / "data.csv"
    path.write_text("answer,output,output\na,a,b\n")
    result = run_eval({"dataset": {"path": str(path)}, "metrics": OFFLINE})
    assert result.code == 2
    assert "has more than one column named 'output'" in result.stderr and str(path) in result.stderr


def test_duplicate_parquet_columns_are_an_error_naming_the_column(tmp_path: Path, run_eval):
    path = tmp_path / "data.parquet"
    table = pa.Table.from_arrays(
        [pa.array(["a"]), pa.array(["a"]), pa.array(["b"])], names=["answer", "output", "output"]
    )
    pq.write_table(table, path)
    result = run_eval({"dataset": {"path": str(path)}, "metrics": OFFLINE}, "--skip_preflight")
    assert result.code != 0
    assert "has more than one column named 'output'" in result.stderr and str(path) in result.stderr
    result = run_eval({"dataset": {"path": str(path)}, "metrics": OFFLINE})  # the preflight says the same
    assert result.code == 2 and "more than one column named 'output'" in result.stderr


@pytest.mark.slow
def test_csv_and_jsonl_share_one_cell_limit(tmp_path: Path, run_eval, monkeypatch):
    # 200,000 characters: over CSV's default field limit (131,072), which used to fail the whole file.
    long = "x" * 200_000
    csv_path = tmp_path / "data.csv"
    csv_path.write_text(f"answer,output\n{long},{long}\nb,b\n")
    result = run_eval({"dataset": {"path": str(csv_path)}, "metrics": OFFLINE})
    assert result.code == 0, result.stderr
    assert [r["status"] for r in result.rows] == ["ok", "ok"]
    assert result.score("exact-match.exact-match")["mean"] == 1.0
    # Over the shared limit (lowered here so the test stays small): a failed input row, same message in both formats.
    monkeypatch.setattr(sanitize, "MAX_CELL_CHARS", 150_000)
    jsonl_path = tmp_path / "data.jsonl"
    jsonl_path.write_text(
        json.dumps({"answer": long, "output": long}) + "\n" + json.dumps({"answer": "b", "output": "b"}) + "\n"
    )
    result = run_eval(
        {"dataset": {"path": str(jsonl_path)}, "params": {"ignore_request_failure": True}, "metrics": OFFLINE}
    )
    assert result.code == 0, result.stderr
    assert [r["status"] for r in result.rows] == ["error", "ok"]
    (error,) = result.errors
    assert error["phase"] == "input"
    message = "row 0 holds a text value of 200,000 characters, over the limit of 150,000"
    assert message in error["error"]
    # CSV rows go through the same check when they are read (no second full run needed to show it).
    with csv_path.open("rb") as stream:
        (item, raw, problem), _ = list(iter_records(stream, str(csv_path), "csv"))
    row = _input_row(0, item, raw, problem)
    assert row.failure is not None and row.failure.phase == "input" and message in row.failure.text
