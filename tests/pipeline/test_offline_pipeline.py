"""The whole graph on Beam's local runner over real files, with outputs already in the dataset."""

import math

ROWS = [
    {"q": "capital of France?", "answer": "Paris", "output": "paris"},
    {"q": "2+2?", "answer": 4, "output": "4"},
    {"q": "author of 1984?", "answer": "George Orwell", "output": "Orwell"},
    {"q": "largest ocean?", "answer": "The Pacific", "output": "Atlantic"},
]


def offline_config(path, **params):
    return {
        "dataset": {"path": str(path)},
        "params": params,
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
            {"type": "f1", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
        ],
    }


def test_offline_scores_and_contract_invariants(write_jsonl, run_eval):
    result = run_eval(offline_config(write_jsonl(ROWS)))
    assert result.code == 0, result.stderr
    assert result.results["status"] == "completed"
    assert result.results["counts"] == {"rows": 4, "ok": 4, "errors": 0}
    em = result.score("exact-match.exact-match")
    assert (em["count"], em["nan_count"], em["sum"], em["mean"]) == (4, 0, 2.0, 0.5)
    assert em["percentiles"]["p50"] == 0.5 and em["histogram"]["bins"][0]["count"] == 2
    f1 = result.score("f1.f1")
    assert f1["mean"] == (1.0 + 1.0 + 2 / 3 + 0.0) / 4
    rows = result.rows
    assert [r["row_index"] for r in rows] == [0, 1, 2, 3]
    assert [r["exact-match.exact-match"] for r in rows] == [1.0, 1.0, 0.0, 0.0]
    assert all(r["status"] == "ok" and r["error"] is None for r in rows)
    assert result.errors == []
    assert "exact-match.exact-match" in result.stdout


def test_jsonl_and_parquet_give_identical_results(write_jsonl, write_parquet, run_eval):
    rows = [{"q": f"q{i}", "answer": str(i % 7), "output": str(i % 5)} for i in range(300)]
    from_jsonl = run_eval(offline_config(write_jsonl(rows)))
    from_parquet = run_eval(offline_config(write_parquet(rows, row_group_size=64)))
    assert from_jsonl.code == from_parquet.code == 0
    assert from_jsonl.results["aggregate_scores"] == from_parquet.results["aggregate_scores"]
    assert [r["row_index"] for r in from_parquet.rows] == list(range(300))
    assert [r["item"] for r in from_jsonl.rows] == [r["item"] for r in from_parquet.rows]


def test_limit_and_glob_keep_dataset_positions(write_jsonl, run_eval, tmp_path):
    write_jsonl(ROWS[:2], "part-a.jsonl")
    write_jsonl(ROWS[2:], "part-b.jsonl")
    config = offline_config(tmp_path / "part-*.jsonl")
    full = run_eval(config)
    assert [(r["row_index"], r["exact-match.exact-match"]) for r in full.rows] == [
        (0, 1.0),
        (1, 1.0),
        (2, 0.0),
        (3, 0.0),
    ]
    limited = run_eval(config, "--limit", "3")
    assert limited.results["counts"]["rows"] == 3
    assert [r["row_index"] for r in limited.rows] == [0, 1, 2]


def test_lenient_failures_become_nan_rows_and_error_records(write_jsonl, run_eval, tmp_path):
    path = write_jsonl(ROWS[:2])
    with path.open("a") as handle:
        handle.write("{not json\n")
        handle.write('{"q": "no answer field", "output": "x"}\n')
    result = run_eval(offline_config(path, ignore_request_failure=True))
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 4, "ok": 2, "errors": 2}
    em = result.score("exact-match.exact-match")
    assert (em["count"], em["nan_count"]) == (2, 2)
    rows = result.rows
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "error"]
    assert math.isnan(rows[2]["exact-match.exact-match"]) and rows[2]["item"] == "{not json"
    errors = result.errors
    assert [(e["row_index"], e["phase"], e["metric"]) for e in errors] == [
        (2, "input", None),
        (3, "scoring", "exact-match"),
    ]
    assert "line 3 is not valid JSON" in errors[0]["error"]
    assert "'answer'" in errors[1]["error"] and "metric 'f1'" in errors[1]["error"]


def test_strict_mode_fails_naming_the_first_row_and_writes_no_results(write_jsonl, run_eval):
    rows = [*ROWS[:2], {"q": "x", "output": "y"}, {"q": "z", "output": "w"}]
    result = run_eval(offline_config(write_jsonl(rows)), "--skip_preflight")
    assert result.code == 1
    assert "on row 2" in result.stderr and "'answer'" in result.stderr
    assert "2 of 4 rows failed" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (result.output / "results.json").exists()
    assert len(result.rows) == 4 and len(result.errors) == 2


def test_refuses_to_mix_runs_without_overwrite(write_jsonl, run_eval, tmp_path):
    config = offline_config(write_jsonl(ROWS))
    out = tmp_path / "same"
    assert run_eval(config, output=out).code == 0
    second = run_eval(config, output=out)
    assert second.code == 2 and "already holds outputs" in second.stderr and "--overwrite" in second.stderr
    assert run_eval(config, "--overwrite", output=out).code == 0


def test_gzipped_jsonl_and_csv_read_like_plain_files(tmp_path, run_eval):
    import gzip

    (tmp_path / "d.jsonl.gz").write_bytes(
        gzip.compress(b'{"answer": "a", "output": "a"}\n\n{"answer": "b", "output": "c"}\n')
    )
    (tmp_path / "d.csv.gz").write_bytes(gzip.compress('\ufeffanswer,output\na,a\n"b\nb",c\n'.encode()))
    for name in ("d.jsonl.gz", "d.csv.gz"):
        result = run_eval(offline_config(tmp_path / name))
        assert result.code == 0, result.stderr
        assert [r["exact-match.exact-match"] for r in result.rows] == [1.0, 0.0]
