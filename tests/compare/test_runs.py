"""History records, the latest-baseline rule, and the history table."""

import csv
import io
import json

from beameval.compare.runs import baseline_run, format_runs, history_record, latest_run, verdict_record


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
    assert table[0].split() == ["finished_at", "run_id", "model", "rows", "errors", "eval_hash", "verdict", "em"]
    assert "0.5000 [0.2000, 0.8000]" in table[1] and "r1" in table[1]
    rows = list(csv.DictReader(io.StringIO(format_runs(records, "csv"))))
    assert rows[0]["em.mean"] == "0.5" and rows[0]["em.ci_high"] == "0.8" and rows[0]["rows"] == "10"
    assert json.loads(format_runs(records, "json")) == records


def test_latest_skips_runs_that_failed_their_gate_and_previous_does_not() -> None:
    runs = [history_record(_results(f"r{i}", f"2025-01-0{i}T00:00:00.000Z"), f"/out/{i}") for i in (1, 2, 3)]
    verdicts = [
        verdict_record("r1", None, None, "2025-01-01T01:00:00.000Z"),  # no baseline: accepted
        verdict_record("r2", "NO-GO", "r1", "2025-01-02T01:00:00.000Z"),
    ]
    records = [runs[0], verdicts[0], runs[1], verdicts[1]]
    assert baseline_run(records, "latest", "e1", "r3", "/out/3")["run_id"] == "r1"
    assert baseline_run(records, "previous", "e1", "r3", "/out/3")["run_id"] == "r2"
    # a later GO of the same run (compared again) makes it accepted
    records.append(verdict_record("r2", "GO", "r1", "2025-01-02T02:00:00.000Z"))
    assert baseline_run(records, "latest", "e1", "r3", "/out/3")["run_id"] == "r2"
    # INCONCLUSIVE is not accepted
    records = [runs[0], runs[1], verdict_record("r2", "INCONCLUSIVE", "r1", "2025-01-02T01:00:00.000Z")]
    assert baseline_run(records, "latest", "e1", "r3", "/out/3")["run_id"] == "r1"
    table = format_runs([*records, runs[2]], "table").splitlines()
    assert len(table) == 4 and "INCONCLUSIVE" in table[2] and table[3].split()[6] == "-"


def test_accepted_means_gated_a_run_whose_compare_never_ran_is_not_latest() -> None:
    """Night 2 regressed and its compare task crashed: night 3 (the same regression) must still meet night 1."""
    runs = [history_record(_results(f"r{i}", f"2025-01-0{i}T00:00:00.000Z"), f"/out/{i}") for i in (1, 2, 3)]
    records = [runs[0], runs[1]]  # r1 never compared either: the first run of its eval_hash, accepted
    assert baseline_run(records, "latest", "e1", "r3", "/out/3")["run_id"] == "r1"
    assert baseline_run(records, "previous", "e1", "r3", "/out/3")["run_id"] == "r2"
    records.append(verdict_record("r2", "GO", "r1", "2025-01-02T01:00:00.000Z"))  # once gated GO, r2 is accepted
    assert baseline_run(records, "latest", "e1", "r3", "/out/3")["run_id"] == "r2"
    # the first run of another eval_hash is accepted on its own, not the first run of the history
    other = history_record({**_results("x1", "2025-01-04T00:00:00.000Z")}, "/out/x1")
    other["eval_hash"] = "e2"
    assert baseline_run([*records, other], "latest", "e2", "x2", "/out/x2")["run_id"] == "x1"
