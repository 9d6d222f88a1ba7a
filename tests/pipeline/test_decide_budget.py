"""``--decide`` and ``params.budget``: every wave's Beam job belongs to one job, so the budget holds for all of them.

The test server echoes each prompt (``q12 blue``: 2 prompt and 2 completion tokens a
request), so what the run may spend is counted from the server's own tally of prompts,
independently of what the run reports. The candidate equals the baseline, so it would go on
for a few waves before GO; the budget runs out inside the second wave.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from beameval.testserver.harness import ServerProcess

ROWS, WAVE = 600, 100
BUDGET = 600  # tokens: 150 rows at 4 tokens, so the second wave of 100 rows cannot be paid in full
DATA = [{"question": f"q{i} {'red' if i % 2 else 'blue'}"} for i in range(ROWS)]
POLICY = {"scores": {"exact-match.exact-match": {"max_drop": 0.05}, "ok_rate": {"max_drop": 0.05}}}

pytestmark = pytest.mark.slow


def _config(path: Path, target: dict[str, Any], budget: int | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"parallelism": 4, "max_retries": 1, "inference": {"max_tokens": 4}}
    if budget is not None:
        params["budget"] = {"max_tokens": budget}
    return {
        "dataset": {"path": str(path)},
        "target": target,
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": params,
        "metrics": [{"type": "exact-match", "reference": "{{ item.question }}"}],
        "decide": {"seed": 5, "wave_rows": WAVE},
    }


def _billed(server: ServerProcess) -> int:
    """The tokens the server billed: each prompt's words twice (the prompt, and its echo)."""
    return sum(count * 2 * len(prompt.split()) for prompt, count in server.stats()["per_prompt"].items())


def test_the_budget_holds_across_waves_and_into_the_resume(  # type: ignore[no-untyped-def]
    clean_server, model_target, write_jsonl, run_eval, tmp_path: Path
) -> None:
    data = write_jsonl(DATA)
    base = run_eval(_config(data, model_target(name="base")), "--progress_interval", "0")
    assert base.code == 0, base.stderr
    policy = tmp_path / "gate.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    clean_server.reset()

    config = _config(data, model_target(name="candidate"), BUDGET)
    decided = run_eval(
        config, "--decide", "--baseline", str(base.output), "--policy", str(policy), "--progress_interval", "0"
    )
    billed = _billed(clean_server)
    assert decided.code == 5, decided.stderr
    assert "reached its budget" in decided.stderr
    # Each reservation is at least the reply's real use, so nothing in flight can take the job past the budget;
    # and the second wave spent what the first left, not a budget of its own.
    assert 0.9 * BUDGET <= billed <= BUDGET
    results = decided.results
    decision = results["decision"]
    assert decision["verdict"] == "INCONCLUSIVE" and decision["rows_evaluated"] == 2 * WAVE
    assert len(decision["waves"]) == 2
    assert (results["status"], results["complete"], results["stopped"]) == ("stopped", False, "budget")
    assert results["usage"]["budget"]["spent_tokens"] == billed  # the job's spend: every wave's
    assert results["usage"]["requests"] == decision["requests_sent"] == billed // 4
    job = json.loads((decided.output / "_responses" / "job.json").read_text())["id"]
    assert (decided.output / "_responses" / "spend").is_dir()  # the job's ledger, which a --resume starts from

    # --resume without --decide is the same job: its budget is spent, so it sends nothing, not even the preflight's
    # first request (before, checked against the whole params.budget: 4 tokens more).
    resumed = run_eval(config, "--resume", "--progress_interval", "0", output=decided.output)
    total = _billed(clean_server)
    print(f"--decide with a budget of {BUDGET} tokens: {billed} billed over 2 waves; after --resume: {total}")
    assert resumed.code == 5, resumed.stderr
    assert total == billed
    assert json.loads((decided.output / "_responses" / "job.json").read_text())["id"] == job
    assert resumed.results["usage"]["budget"]["spent_tokens"] == total
    assert sorted(row["row_index"] for row in resumed.rows) == list(range(ROWS))


def test_targets_share_one_budget_over_every_wave(  # type: ignore[no-untyped-def]
    clean_server, write_jsonl, run_eval, tmp_path: Path
) -> None:
    """Two targets decided in waves: one budget for both targets and every wave, not one per target."""
    budget = 1000  # a wave of 100 rows costs 800 tokens for the two targets: the second cannot be paid in full
    config = _config(write_jsonl(DATA), {}, budget)
    del config["target"]
    config["targets"] = [
        {"name": name, "model": {"url": clean_server.base_url, "name": name, "format": "openai"}}
        for name in ("base", "same")
    ]
    policy = tmp_path / "gate.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    result = run_eval(config, "--decide", "--policy", str(policy), "--progress_interval", "0")
    billed = _billed(clean_server)
    assert result.code == 5, result.stderr
    assert "reached its budget" in result.stderr
    assert 0.9 * budget <= billed <= budget
    top = result.results
    assert (top["status"], top["complete"], top["stopped"]) == ("stopped", False, "budget")
    assert top["usage"]["budget"]["spent_tokens"] == billed
    decision = top["decision"]
    assert decision["verdict"] == "INCONCLUSIVE" and decision["candidates"]["same"]["rows_evaluated"] == 2 * WAVE
    for name in ("base", "same"):
        target = json.loads((result.output / "targets" / name / "results.json").read_text())
        assert target["usage"]["budget"]["spent_tokens"] == billed  # the job's spend, in each target's
        assert target["stopped"] == "budget"

    resumed = run_eval(config, "--resume", "--progress_interval", "0", output=result.output)  # the same job
    total = _billed(clean_server)
    print(f"--decide over two targets with a budget of {budget} tokens: {billed} billed; after --resume: {total}")
    assert resumed.code == 5, resumed.stderr
    assert total == billed  # before: one preflight request per target (8 tokens past the budget)
