"""``examples/airflow/nightly_eval.py`` run for real: ``airflow dags test`` for four nights, offline, on sqlite.

Airflow 3.3.2 and its providers live in their own virtual environment (``airflow_env``,
built by ``scripts/test.sh`` beside pytest, or here on first use); the DAG's ``python``
parameter points at this interpreter, which has the evaluator. The model is the project's
test server on 127.0.0.1, which echoes the question:

- night 1, the good model: the run succeeds and ``compare`` says there is no baseline yet;
- night 2, a degraded model (scripted to answer "I don't know." to questions containing
  "answer 1" or "answer 2"): ``compare`` is NO-GO against night 1 and the DAG run fails;
- night 3, still degraded: NO-GO again, against night 1 (``latest`` is the last *accepted*
  run: night 2 failed its gate, so a regression that lasts two nights does not turn green);
- night 4, the good model again: GO against night 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.scheduling import airflow_env

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = ROOT / "examples" / "airflow" / "nightly_eval.py"
ROWS = [{"question": f"answer {i}", "answer": f"answer {i}" if i % 5 else f"other {i}"} for i in range(40)]
DEGRADED = ("answer 1", "answer 2")
IDK = "I don't know."


def _correct(degraded: bool) -> list[int]:
    """Each row's exact-match written out: the server echoes, except the degraded rules."""
    replies = [IDK if degraded and any(m in r["question"] for m in DEGRADED) else r["question"] for r in ROWS]
    return [int(reply == row["answer"]) for reply, row in zip(replies, ROWS, strict=True)]


@pytest.fixture(scope="module")
def airflow() -> tuple[Path, float]:
    return airflow_env.ensure(log=Path(f"{airflow_env.VENV}.build.log"))


@pytest.mark.slow
@pytest.mark.timeout(1500)  # 4 nights take about 3 minutes; building the environment here adds about 5
def test_nights_no_baseline_then_no_go_twice_then_go_against_the_last_accepted(airflow, server, tmp_path: Path) -> None:
    airflow_bin, built_s = airflow
    env = airflow_env.airflow_home(tmp_path, [DAG_FILE])
    started = time.monotonic()
    migrate = subprocess.run([str(airflow_bin), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    timings = {"build_venv_s": round(built_s, 1), "db_migrate_s": round(time.monotonic() - started, 1)}

    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    config = {
        "dataset": {"path": str(tmp_path / "data.jsonl")},
        "target": {"model": {"url": server.base_url, "name": "test-model"}},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 8, "max_retries": 1},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "gate.yaml").write_text(yaml.safe_dump({"scores": {"exact-match.exact-match": {"max_drop": 0.02}}}))
    runs, history = tmp_path / "runs", tmp_path / "history"
    conf = {
        "config": str(tmp_path / "eval.yaml"),
        "output_root": str(runs),
        "history": str(history),
        "policy": str(tmp_path / "gate.yaml"),
        "python": sys.executable,  # the interpreter with the evaluator; Airflow's own has none
    }

    def night(date: str) -> tuple[int, str]:
        return airflow_env.dags_test(airflow_bin, env, "nightly_eval", date, conf, timings)

    server.reset(config=True)
    code, log = night("2026-01-01")
    assert code == 0, log[-6000:]
    assert "state=success" in log and "no baseline" in log
    assert "--runner=DirectRunner" in log and "--labels=airflow-version=v3-3-2" in log  # what the operator adds
    first = json.loads((runs / "2026-01-01" / "results.json").read_text())
    assert first["run"]["runner"] == "FnApiRunner"  # DirectRunner ran on the local engine
    assert first["aggregate_scores"]["scores"][0]["sum"] == sum(_correct(False)) == 32
    assert not (runs / "2026-01-01" / "comparison" / "comparison.json").exists()

    server.configure(rules=[{"match": m, "reply": IDK} for m in DEGRADED])
    code, log = night("2026-01-02")
    assert code != 0 and "state=failed" in log, log[-6000:]
    second = json.loads((runs / "2026-01-02" / "comparison" / "comparison.json").read_text())
    good, bad = _correct(False), _correct(True)
    regressed = sum(1 for g, b in zip(good, bad, strict=True) if g > b)
    assert regressed == 18 and not any(b > g for g, b in zip(good, bad, strict=True))
    score = second["scores"][0]
    assert second["verdict"] == "NO-GO" and second["baseline"]["output"] == str(runs / "2026-01-01")
    assert score["delta"] == pytest.approx(-regressed / len(ROWS))
    assert score["p_value"] == pytest.approx(2 * 0.5**regressed)  # exact McNemar: 18 discordant pairs, all one way
    assert f"NO-GO: the candidate regressed; report: {runs / '2026-01-02' / 'comparison' / 'report.html'}" in log

    code, log = night("2026-01-03")  # the same regression, a second night
    assert code != 0 and "state=failed" in log, log[-6000:]
    third = json.loads((runs / "2026-01-03" / "comparison" / "comparison.json").read_text())
    assert third["verdict"] == "NO-GO" and third["baseline"]["output"] == str(runs / "2026-01-01")
    assert third["scores"][0]["delta"] == pytest.approx(-regressed / len(ROWS))

    server.reset(config=True)
    code, log = night("2026-01-04")
    assert code == 0 and "state=success" in log, log[-6000:]
    fourth = json.loads((runs / "2026-01-04" / "comparison" / "comparison.json").read_text())
    assert fourth["verdict"] == "GO" and fourth["baseline"]["output"] == str(runs / "2026-01-01")
    assert fourth["scores"][0]["delta"] == 0
    assert f"verdict: GO; report: {runs / '2026-01-04' / 'comparison' / 'report.html'}" in log
    records = [json.loads(line) for line in (history / "runs.jsonl").read_text().splitlines()]
    nights = ("2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04")
    assert [r["output"] for r in records if "output" in r] == [str(runs / d) for d in nights]
    assert [r["verdict"] for r in records if "compared_at" in r] == [None, "NO-GO", "NO-GO", "GO"]
    print(f"airflow timings: {timings}")
