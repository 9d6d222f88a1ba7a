"""``nightly_eval`` with ``decide: true`` run for real: ``airflow dags test`` for three nights, offline, on sqlite.

The same Airflow environment as ``test_airflow_dag`` (``airflow_env``); the model is the
project's test server on 127.0.0.1, which echoes the question, so every row is right
unless a rule scripts another answer. 300 rows, waves of 50, a margin of 0.1:

- night 1: no accepted run in the history yet, so the ``decide`` task runs the whole
  evaluation (every row sent once), which becomes the baseline; the task succeeds;
- night 2, a model that answers "nope" to every question holding "red" (half the rows):
  ``decide`` is NO-GO after the first wave, the DAG run fails, and the server received
  exactly that wave's requests;
- night 3, the good model: GO against night 1 (night 2 was decided NO-GO and stopped)
  before the last row, with exactly the evaluated rows sent.

In every night the ``evaluate`` and ``compare`` tasks are skipped by the ``mode`` branch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.scheduling import airflow_env

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = ROOT / "examples" / "airflow" / "nightly_eval.py"
ROWS = [{"question": f"q{i} {'red' if i % 2 else 'blue'}"} for i in range(300)]
WAVE = 50


@pytest.fixture(scope="module")
def airflow() -> tuple[Path, float]:
    return airflow_env.ensure(log=Path(f"{airflow_env.VENV}.build.log"))


@pytest.mark.slow
@pytest.mark.timeout(1500)  # 3 nights take about 2-3 minutes; building the environment here adds about 5
def test_decide_nights_full_baseline_then_no_go_then_go_early(airflow, server, tmp_path: Path) -> None:
    airflow_bin, _ = airflow
    env = airflow_env.airflow_home(tmp_path, [DAG_FILE])
    migrate = subprocess.run([str(airflow_bin), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]

    (tmp_path / "data.jsonl").write_text("".join(json.dumps({**row, "answer": row["question"]}) + "\n" for row in ROWS))
    config = {
        "dataset": {"path": str(tmp_path / "data.jsonl")},
        "target": {"model": {"url": server.base_url, "name": "test-model"}},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 8, "max_retries": 1},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
        "decide": {"seed": 3, "wave_rows": WAVE},
    }
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    gated = {"max_drop": 0.1}
    (tmp_path / "gate.yaml").write_text(
        yaml.safe_dump({"scores": {"exact-match.exact-match": gated, "ok_rate": gated}})
    )
    runs, history = tmp_path / "runs", tmp_path / "history"
    conf = {
        "config": str(tmp_path / "eval.yaml"),
        "output_root": str(runs),
        "history": str(history),
        "policy": str(tmp_path / "gate.yaml"),
        "python": sys.executable,
        "decide": True,
    }
    timings: dict[str, float] = {}

    def night(date: str) -> tuple[int, str]:
        return airflow_env.dags_test(airflow_bin, env, "nightly_eval", date, conf, timings)

    server.reset(config=True)
    code, log = night("2026-02-01")
    assert code == 0 and "state=success" in log, log[-6000:]
    assert "no accepted run to decide against yet" in log
    first = json.loads((runs / "2026-02-01" / "results.json").read_text())
    assert first["complete"] is True and "decision" not in first
    assert first["usage"]["requests"] == server.stats()["requests"] == len(ROWS)
    assert not (runs / "2026-02-01" / "comparison").exists()  # compare was skipped by the branch

    server.reset()
    server.configure(rules=[{"match": "red", "reply": "nope"}])
    code, log = night("2026-02-02")
    assert code != 0 and "state=failed" in log, log[-6000:]
    report = runs / "2026-02-02" / "report.html"
    assert f"NO-GO: the candidate regressed; report: {report}" in log
    second = json.loads((runs / "2026-02-02" / "results.json").read_text())
    decision = second["decision"]
    assert decision["verdict"] == "NO-GO" and decision["rows_evaluated"] == WAVE
    assert decision["baseline_run_id"] == first["provenance"]["run_id"]
    assert second["stopped"] == "decided" and second["counts"]["skipped"] == len(ROWS) - WAVE
    assert second["usage"]["requests"] == server.stats()["requests"] == WAVE

    server.reset(config=True)
    code, log = night("2026-02-03")
    assert code == 0 and "state=success" in log, log[-6000:]
    assert f"verdict: GO; report: {runs / '2026-02-03' / 'report.html'}" in log
    third = json.loads((runs / "2026-02-03" / "results.json").read_text())
    decision = third["decision"]
    assert decision["verdict"] == "GO" and decision["baseline_run_id"] == first["provenance"]["run_id"]
    assert WAVE < decision["rows_evaluated"] < len(ROWS)
    assert third["usage"]["requests"] == server.stats()["requests"] == decision["rows_evaluated"]
    records = [json.loads(line) for line in (history / "runs.jsonl").read_text().splitlines()]
    assert [r.get("stopped") for r in records if "output" in r] == [None, "decided", "decided"]
    assert [r["verdict"] for r in records if "compared_at" in r] == ["NO-GO", "GO"]
    print(f"airflow decide timings: {timings}")
