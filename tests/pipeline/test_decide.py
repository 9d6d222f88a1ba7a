"""``--decide`` end to end: the CLI in-process, Beam's local runner, one job per wave, the test server over HTTP.

The server echoes each prompt, so exact-match against the question is 1 on every row; a
scripted rule makes the candidate answer "nope" to every prompt holding "red" (half the
rows): a clear regression. The server counts what it receives, so the tests assert that
exactly the evaluated rows' prompts were sent, and that ``--resume`` sends exactly the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from beameval.compare.runs import baseline_run, is_verdict_record
from beameval.testserver.harness import ServerProcess
from pipeline.history import load_history
from tests.conftest import CliResult

ROWS = 3000  # the size: decisions on a fraction of it, and --resume sending the rest
WAVE = 100
#: The multi-target test's dataset: a third of the size keeps its waves (each a job per target) short.
TARGET_ROWS = 1000


def _data(count: int) -> list[dict[str, Any]]:
    return [
        {"question": f"q{i} {'red' if i % 2 else 'blue'}", "answer": f"q{i} {'red' if i % 2 else 'blue'}"}
        for i in range(count)
    ]


DATA = _data(ROWS)
PRICING = {"input_per_million": 2.0, "output_per_million": 8.0}
POLICY = {"scores": {"exact-match.exact-match": {"max_drop": 0.05}, "ok_rate": {"max_drop": 0.05}}}

pytestmark = pytest.mark.slow


def _config(path: Path, target: dict[str, Any]) -> dict[str, Any]:
    return {
        "dataset": {"path": str(path)},
        "target": target,
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 8, "max_retries": 1},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
        "decide": {"seed": 7, "wave_rows": WAVE},
    }


def _rows(output: Path) -> list[dict[str, Any]]:
    return sorted(
        (r for f in sorted((output / "rows").glob("*.parquet")) for r in pq.read_table(f).to_pylist()),
        key=lambda r: r["row_index"],
    )


def _prompts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """What the server should have received for ``rows``: each row's prompt (its question) once."""
    return {DATA[r["row_index"]]["question"]: 1 for r in rows}


@pytest.fixture
def baseline(clean_server, model_target, write_jsonl, run_eval, tmp_path: Path):  # type: ignore[no-untyped-def]
    data = write_jsonl(DATA)
    history = str(tmp_path / "history")
    result = run_eval(_config(data, model_target(name="base-model")), "--progress_interval", "0", "--history", history)
    assert result.code == 0, result.stderr
    policy = tmp_path / "gate.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    clean_server.reset()
    return data, result.output, policy, history


def _decide(run_eval, config: dict[str, Any], base: Path, policy: Path, *extra: str) -> CliResult:  # type: ignore[no-untyped-def]
    return run_eval(
        config, "--decide", "--baseline", str(base), "--policy", str(policy), "--progress_interval", "0", *extra
    )


def test_a_clear_regression_is_no_go_after_a_wave_and_resume_completes_it(  # type: ignore[no-untyped-def]
    baseline, clean_server, model_target, run_eval, tmp_path: Path
) -> None:
    data, base, policy, history = baseline
    clean_server.configure(rules=[{"match": "red", "reply": "nope"}])
    config = _config(data, model_target(name="candidate"))
    result = _decide(run_eval, config, base, policy, "--history", history)
    assert result.code == 1, result.stderr
    assert "decided: NO-GO" in result.stderr
    results = json.loads((result.output / "results.json").read_text())
    decision = results["decision"]
    evaluated = decision["rows_evaluated"]
    assert decision["verdict"] == "NO-GO" and evaluated == WAVE and decision["rows_total"] == ROWS
    assert results["complete"] is False and results["stopped"] == "decided"
    assert results["counts"]["skipped"] == ROWS - evaluated
    assert clean_server.stats()["requests"] == evaluated  # the preflight's request was the order's first row
    rows = _rows(result.output)
    assert len(rows) == ROWS
    done = [r for r in rows if r["status"] != "skipped"]
    assert clean_server.stats()["per_prompt"] == _prompts(done)  # exactly the evaluated rows' prompts, once each
    assert sorted(r["eval_order"] for r in done) == list(range(evaluated))
    assert all(r["skip_reason"] == "decided" and r["eval_order"] >= evaluated for r in rows if r["status"] == "skipped")
    wave = decision["waves"][-1]["scores"]
    em = next(s for s in wave if s["name"] == "exact-match.exact-match")
    assert em["cs_high"] < -0.05 and em["n"] == evaluated and em["mean_delta"] < -0.3
    comparison = json.loads((result.output / "comparison.json").read_text())
    assert comparison["verdict"] == "NO-GO" and comparison["decision"] == decision
    assert "decision" in (result.output / "report.html").read_text()

    clean_server.reset()  # --resume without --decide: only the skipped rows are sent
    resumed = run_eval(config, "--resume", "--progress_interval", "0", "--history", history, output=result.output)
    assert resumed.code == 0, resumed.stderr
    resent = clean_server.stats()["requests"]
    assert resent == ROWS - evaluated
    assert clean_server.stats()["per_prompt"] == _prompts([r for r in rows if r["status"] == "skipped"])
    completed = json.loads((result.output / "results.json").read_text())
    assert completed["complete"] is True and "decision" not in completed
    assert completed["counts"] == {"rows": ROWS, "ok": ROWS, "errors": 0}
    assert completed["aggregate_scores"]["scores"][0]["mean"] == 0.5
    clean = run_eval(config, "--progress_interval", "0")  # the resumed run equals a clean one, row by row
    kept = ("row_index", "status", "output_text", "exact-match.exact-match", "error")
    assert [{k: r[k] for k in kept} for r in _rows(result.output)] == [
        {k: r[k] for k in kept} for r in _rows(clean.output)
    ]
    # the history: the decided run is recorded as stopped with its verdict; completed, it keeps that NO-GO
    records = load_history(history)
    runs = [r for r in records if not is_verdict_record(r)]
    assert [r.get("stopped") for r in runs] == [None, "decided", None]
    verdicts = {r["run_id"]: r["verdict"] for r in records if is_verdict_record(r)}
    assert verdicts == {runs[1]["run_id"]: "NO-GO", runs[2]["run_id"]: "NO-GO"}
    eval_hash = completed["provenance"]["eval_hash"]
    assert baseline_run(records, "latest", eval_hash, None, None)["run_id"] == runs[0]["run_id"]
    print(f"NO-GO after {evaluated} of {ROWS} rows ({evaluated} requests); --resume sent {resent}")


def test_an_equal_candidate_is_go_early(baseline, clean_server, model_target, run_eval) -> None:  # type: ignore[no-untyped-def]
    data, base, policy, history = baseline
    config = _config(data, model_target(name="candidate-2", pricing=PRICING))
    result = run_eval(config, "--decide", "--baseline", "latest", "--history", history, "--policy", str(policy))
    assert result.code == 0, result.stderr
    results = json.loads((result.output / "results.json").read_text())
    decision = results["decision"]
    assert decision["verdict"] == "GO" and decision["rows_evaluated"] <= 0.4 * ROWS
    sent = clean_server.stats()["requests"]
    assert sent == decision["rows_evaluated"]
    evaluated = [r for r in _rows(result.output) if r["status"] != "skipped"]
    assert sorted(r["eval_order"] for r in evaluated) == list(range(sent))  # the order's head, nothing else
    assert clean_server.stats()["per_prompt"] == _prompts(evaluated)
    print(f"GO after {sent} of {ROWS} rows ({len(decision['waves'])} waves), {sent} requests")
    # usage is the whole run's, every wave's job together (each prompt and answer is two words)
    usage = results["usage"]
    assert len(decision["waves"]) > 1 and results["run"]["waves"] == len(decision["waves"])
    assert usage["requests"] == sent == decision["requests_sent"] and usage["cache"] == {"hits": 0, "misses": sent}
    assert usage["prompt_tokens"] == usage["completion_tokens"] == 2 * sent and usage["latency_ms"]["count"] == sent
    assert usage["cost_usd"]["total"] == pytest.approx((2.0 * 2 * sent + 8.0 * 2 * sent) / 1e6)
    assert results["run"]["counters"]["requests"] == sent
    lows = [w["scores"][1]["cs_low"] for w in decision["waves"]]
    assert lows == sorted(lows) and lows[-1] >= -0.05  # the bounds narrowed wave by wave
    assert decision["baseline_run_id"] == json.loads((base / "results.json").read_text())["provenance"]["run_id"]
    # a decided run, even GO, is never a baseline: latest still names the first run
    records = load_history(history)
    eval_hash = json.loads((base / "results.json").read_text())["provenance"]["eval_hash"]
    assert baseline_run(records, "previous", eval_hash, None, None)["output"] == str(base)


def test_decide_needs_a_baseline(model_target, write_jsonl, run_eval) -> None:  # type: ignore[no-untyped-def]
    result = run_eval(_config(write_jsonl(DATA[:10]), model_target()), "--decide")
    assert result.code == 2 and "--baseline" in result.stderr


def test_a_broken_group_is_no_go_with_repeats(  # type: ignore[no-untyped-def]
    clean_server, model_target, write_jsonl, run_eval, tmp_path: Path
) -> None:
    # 400 rows, one in five "green"; the candidate fails every green row: overall δ = −0.2, inside the 0.25 margin,
    # but the green group's δ = −1 makes it NO-GO (groups join the NO-GO family). Each row is sampled twice.
    rows = [{"question": f"q{i} {'green' if i % 5 == 0 else 'other'}"} for i in range(400)]
    data = write_jsonl([{**r, "answer": r["question"], "category": r["question"].split()[1]} for r in rows])
    config = _config(data, model_target(name="base-model"))
    config["params"]["repeats"] = 2
    config["statistics"] = {"group_by": ["category"]}
    config["decide"] = {"seed": 1, "wave_rows": 200}
    base = run_eval(config, "--progress_interval", "0")
    assert base.code == 0, base.stderr
    policy = tmp_path / "wide.yaml"
    policy.write_text(yaml.safe_dump({"scores": {"exact-match.exact-match": {"max_drop": 0.25}}}))
    clean_server.reset()
    clean_server.configure(rules=[{"match": "green", "reply": "nope"}])
    result = _decide(run_eval, {**config, "target": model_target(name="candidate")}, base.output, policy)
    assert result.code == 1, result.stderr
    decision = json.loads((result.output / "results.json").read_text())["decision"]
    assert decision["verdict"] == "NO-GO" and decision["rows_evaluated"] == 200
    assert clean_server.stats()["requests"] == 2 * 200  # two samples of each evaluated row
    scores = {s["name"]: s for s in decision["waves"][-1]["scores"]}
    overall, green = scores["exact-match.exact-match"], scores['exact-match.exact-match[category="green"]']
    assert overall["cs_high"] > -0.25 > green["cs_high"] and green["mean_delta"] == -1.0
    assert overall["beta_high"] == pytest.approx(0.05 / 6)  # K: 2 scores overall + 2 in each of 2 groups


def test_targets_each_candidate_against_the_first(  # type: ignore[no-untyped-def]
    server, write_jsonl, run_eval, tmp_path: Path
) -> None:
    # Two servers: the echo one answers the baseline and an equal candidate, the other fails every "red" row.
    with ServerProcess(rules=[{"match": "red", "reply": "nope"}]) as broken:
        server.reset(config=True)
        config = _config(write_jsonl(_data(TARGET_ROWS)), {})
        del config["target"]
        model = {"format": "openai"}
        config["targets"] = [
            {"name": "base", "model": {**model, "url": server.base_url, "name": "base"}},
            {"name": "worse", "model": {**model, "url": broken.base_url, "name": "worse"}},
            {"name": "same", "model": {**model, "url": server.base_url, "name": "same"}},
        ]
        policy = tmp_path / "gate.yaml"
        policy.write_text(yaml.safe_dump(POLICY))
        result = run_eval(config, "--decide", "--policy", str(policy), "--progress_interval", "0")
        assert result.code == 1, result.stderr  # one NO-GO makes the run NO-GO
        decision = json.loads((result.output / "results.json").read_text())["decision"]
        worse, same = decision["candidates"]["worse"], decision["candidates"]["same"]
        assert worse["verdict"] == "NO-GO" and worse["rows_evaluated"] == WAVE
        assert same["verdict"] == "GO" and same["rows_evaluated"] <= 0.4 * TARGET_ROWS
        assert decision["verdict"] == "NO-GO" and decision["rows_evaluated"] == same["rows_evaluated"]
        # the worse candidate stopped at its decision; the baseline went on as long as "same" needed it
        assert broken.stats()["requests"] == WAVE
        assert server.stats()["requests"] == 2 * same["rows_evaluated"]
        usage = {  # each target's results.json counts its requests over every wave
            name: json.loads((result.output / "targets" / name / "results.json").read_text())["usage"]["requests"]
            for name in ("base", "worse", "same")
        }
        assert usage == {"base": same["rows_evaluated"], "worse": WAVE, "same": same["rows_evaluated"]}
        k = 2 * 2  # two candidates × (exact-match, ok_rate)
        assert worse["waves"][0]["scores"][0]["beta_high"] == pytest.approx(0.05 / k)
        rows = _rows(result.output / "targets" / "worse")
        assert sum(r["status"] == "skipped" for r in rows) == TARGET_ROWS - WAVE
        comparison = json.loads((result.output / "comparison.json").read_text())
        assert [c["verdict"] for c in comparison["comparisons"]] == ["NO-GO", "GO"]
        page = (result.output / "report.html").read_text()
        assert "worse against base" in page and "same against base" in page
