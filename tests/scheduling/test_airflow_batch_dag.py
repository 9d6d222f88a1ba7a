"""``examples/airflow/nightly_batch_eval.py`` run for real: ``airflow dags test`` of one night in batch mode, offline.

The model is the project's test server on 127.0.0.1 with its Batch API taking 50 s per
batch: ``submit`` exits 75 (submitted), the reschedule-mode sensor pokes (reruns with
``--resume``) until the run completes, then ``compare`` finds no baseline. The batches
are submitted once: the pokes attach to them, they never resubmit.
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
DAGS = [ROOT / "examples" / "airflow" / name for name in ("nightly_batch_eval.py", "nightly_eval.py")]
ROWS = [{"question": f"answer {i}", "answer": f"answer {i}" if i % 5 else f"other {i}"} for i in range(40)]


@pytest.fixture(scope="module")
def airflow() -> tuple[Path, float]:
    return airflow_env.ensure(log=Path(f"{airflow_env.VENV}.build.log"))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_batch_night_submits_waits_in_reschedule_mode_then_compares(airflow, server, tmp_path: Path) -> None:
    airflow_bin, _ = airflow
    # the batch DAG imports the compare helpers of the nightly DAG
    env = airflow_env.airflow_home(tmp_path, DAGS, BEAMEVAL_BATCH_POKE_S="3")
    migrate = subprocess.run([str(airflow_bin), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]

    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    model = {"url": server.base_url, "name": "test-model", "format": "openai", "mode": "batch"}
    model["batch"] = {"max_requests": 25, "wait": False, "poll_interval": 1}
    config = {
        "dataset": {"path": str(tmp_path / "data.jsonl")},
        "target": {"model": model},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    runs, history = tmp_path / "runs", tmp_path / "history"
    conf = {"config": str(tmp_path / "eval.yaml"), "output_root": str(runs), "history": str(history)}
    conf["python"] = sys.executable  # the interpreter with the evaluator; Airflow's own has none

    server.reset(config=True)
    # Each pipeline.run takes 10-35 s here (Beam's start-up included): the first poke finds the batches running.
    server.batches(completion_s=50.0, validating_s=2.0, outcomes=[])
    completed = subprocess.run(
        [str(airflow_bin), "dags", "test", "nightly_batch_eval", "2026-02-01", "--conf", json.dumps(conf)],
        env=env,
        cwd=ROOT,  # `python -m pipeline.run` and `-m pipeline.compare` import this tree
        capture_output=True,
        text=True,
        timeout=800,
    )
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0 and "state=success" in log, log[-6000:]
    assert "batches still running" in log  # at least one poke found them running and gave the slot back
    assert "no baseline" in log
    results = json.loads((runs / "2026-02-01" / "results.json").read_text())
    assert results["counts"] == {"rows": 40, "ok": 40, "errors": 0}
    assert results["aggregate_scores"]["scores"][0]["sum"] == 32  # every fifth reference differs from the echo
    assert results["usage"]["batch"]["batches"] == 2 and results["usage"]["batch"]["resubmitted"] == 0
    state = server.batches()
    assert state["batches_created"] == 2 and state["lines_answered"] == 40
    assert server.stats()["requests"] == 0  # not one online completion call
    records = [json.loads(line) for line in (history / "runs.jsonl").read_text().splitlines()]
    runs = [r for r in records if "verdict" not in r]
    verdicts = [r for r in records if "verdict" in r]
    assert len(runs) == 1  # the night's run, recorded once although the sensor reran it with --resume
    assert [(v["run_id"], v["verdict"]) for v in verdicts] == [(runs[0]["run_id"], None)]  # compared: no baseline
