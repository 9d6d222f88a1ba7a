"""The dataset fingerprint is a function of the records' bytes and positions, computed per split as it is read."""

import pyarrow as pa
import pyarrow.parquet as pq

from beameval.core import sanitize

METRICS = [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}]
ROWS = [{"id": i, "answer": f"a{i}", "output": f"a{i}" if i % 3 else "wrong"} for i in range(8)]


def _config(path, **params):
    return {"dataset": {"path": str(path)}, "params": params, "metrics": METRICS}


def _dataset(result):
    return result.results["provenance"]["dataset"]


def test_parquet_fingerprint_depends_on_the_records_only(write_parquet, run_eval, tmp_path):
    path = write_parquet(ROWS, row_group_size=3)  # three splits: 3 + 3 + 2 rows
    first = run_eval(_config(path))
    assert first.code == 0, first.stderr
    assert _dataset(first)["rows"] == 8 and len(_dataset(first)["fingerprint"]) == 32
    again = run_eval(_config(path, repeats=2))  # repeats do not change the dataset
    assert again.code == 0, again.stderr
    assert _dataset(again)["fingerprint"] == _dataset(first)["fingerprint"] and _dataset(again)["rows"] == 8
    changed = write_parquet([*ROWS[:7], {**ROWS[7], "answer": "a7!"}], "changed.parquet", row_group_size=3)
    assert _dataset(run_eval(_config(changed)))["fingerprint"] != _dataset(first)["fingerprint"]
    limited = run_eval(_config(path), "--limit", "5")
    assert _dataset(limited)["rows"] == 5 and _dataset(limited)["fingerprint"] != _dataset(first)["fingerprint"]
    assert first.results["provenance"]["models_seen"] == []  # offline: no target replied


def test_jsonl_fingerprint_is_the_hash_of_the_lines_read(write_jsonl, run_eval, tmp_path):
    path = write_jsonl(ROWS)
    first = run_eval(_config(path))
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    assert _dataset(run_eval(_config(copy)))["fingerprint"] == _dataset(first)["fingerprint"]
    spaced = tmp_path / "spaced.jsonl"  # the same items written with other spacing: other bytes
    spaced.write_text(path.read_text().replace(": ", ":"))
    assert _dataset(run_eval(_config(spaced)))["fingerprint"] != _dataset(first)["fingerprint"]
    limited = run_eval(_config(path), "--limit", "5")
    assert _dataset(limited)["rows"] == 5 and _dataset(limited)["fingerprint"] != _dataset(first)["fingerprint"]


def test_a_parquet_row_group_over_the_cell_limit_is_checked_row_by_row(run_eval, tmp_path, monkeypatch):
    monkeypatch.setattr(sanitize, "MAX_CELL_CHARS", 1_000)  # lowered so the test stays small
    path = tmp_path / "long.parquet"
    rows = [{"answer": "x" * 1_001, "output": "x"}, {"answer": "b", "output": "b"}]
    pq.write_table(pa.Table.from_pylist(rows), path)
    result = run_eval({**_config(path), "params": {"ignore_request_failure": True}})
    assert result.code == 0, result.stderr
    assert [r["status"] for r in result.rows] == ["error", "ok"]
    (error,) = result.errors
    assert error["phase"] == "input" and "row 0 holds a text value of 1,001 characters" in error["error"]
