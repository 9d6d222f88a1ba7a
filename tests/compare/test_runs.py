"""History records, the latest-baseline rule, and the history table."""

import csv
import io
import json

from beameval.compare.runs import format_runs, history_record, latest_run


def _results(run_id: str, finished: str, eval_hash: str = "e1", model: str = "m") -> dict:
    return {
        "status": "completed",
        "counts": {"rows": 10, "ok": 9, "errors": 1},
        "aggregate_scores": {"scores": [{"name": "em", "mean": 0.5, "ci_low": 0.2, "ci_high": 0.8}]},
        "config": {"target": {"model": {"name": model, "api_key_env": "KEY"}}},
        "provenance": {
            "run_id": run_id,
            "started_at": finished,
            "finished_at": finished,
            "config_hash": "c",
            "dataset": {"fingerprint": "fp"},
            "eval_hash": eval_hash,
            "models_seen": [],
        },
    }


def test_history_record_has_the_contract_fields() -> None:
    record = history_record(_results("r1", "2025-01-01T00:00:00.000Z"), "out/1")
    assert record["run_id"] == "r1" and record["output"] == "out/1" and record["target_model"] == "m"
    assert record["dataset_fingerprint"] == "fp" and record["eval_hash"] == "e1" and record["config_hash"] == "c"
    assert record["counts"] == {"rows": 10, "ok": 9, "errors": 1}
    assert record["scores"] == [{"name": "em", "mean": 0.5, "ci_low": 0.2, "ci_high": 0.8}]
    assert "KEY" not in json.dumps(record)


def test_latest_is_the_most_recent_other_run_with_the_eval_hash() -> None:
    records = [
        history_record(_results("r1", "2025-01-01T00:00:00.000Z"), "out/1"),
        history_record(_results("r2", "2025-01-03T00:00:00.000Z"), "out/2"),
        history_record(_results("r3", "2025-01-04T00:00:00.000Z", eval_hash="other"), "out/3"),
        history_record(_results("r4", "2025-01-05T00:00:00.000Z"), "out/4"),
        history_record(_results("r0", "2024-12-31T00:00:00.000Z"), "out/0"),
    ]
    assert latest_run(records, "e1", "r4", "out/4")["run_id"] == "r2"
    assert latest_run(records, "e1", "r9", "out/9")["run_id"] == "r4"
    assert latest_run(records, "e1", "r9", "out/4/")["run_id"] == "r2"  # a rerun into the candidate's directory
    assert latest_run(records, "other", "r3", "out/3") is None
    assert latest_run([], "e1", None, None) is None


def test_history_table_csv_and_json() -> None:
    records = [history_record(_results("r1", "2025-01-01T00:00:00.000Z"), "out/1")]
    table = format_runs(records, "table").splitlines()
    assert table[0].split() == ["finished_at", "run_id", "model", "rows", "errors", "eval_hash", "em"]
    assert "0.5000 [0.2000, 0.8000]" in table[1] and "r1" in table[1]
    rows = list(csv.DictReader(io.StringIO(format_runs(records, "csv"))))
    assert rows[0]["em.mean"] == "0.5" and rows[0]["em.ci_high"] == "0.8" and rows[0]["rows"] == "10"
    assert json.loads(format_runs(records, "json")) == records
