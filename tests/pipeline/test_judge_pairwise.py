"""Pairwise judging with position swaps, end to end: two target servers, a judge server, the Beam runner.

The baseline target answers every row ``meh``; the candidate answers rows 0-7 ``GOOD``,
rows 8-9 ``meh`` too (identical: a tie without asking) and rows 10-11 ``BAD``. A judge that
prefers the better answer must give 8 wins, 2 ties, 2 losses and no position flip; a judge
that always answers "A" (it prefers whatever is shown first) must flip on every judged row,
so every row is a tie. Each judged row is asked exactly twice, once in each order, and a
``--resume`` of the finished run asks nothing again.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from beameval.testserver.harness import ServerProcess
from tests.conftest import CliResult

N = 12
GOOD, SAME, BAD = range(8), range(8, 10), range(10, 12)
START_A, START_B = "[The start of answer A]\n", "[The start of answer B]\n"
PREFERS_BETTER = [
    {"match": START_A + "GOOD", "reply": '{"preference": "A"}'},
    {"match": START_B + "GOOD", "reply": '{"preference": "B"}'},
    {"match": START_A + "BAD", "reply": '{"preference": "B"}'},
    {"match": START_B + "BAD", "reply": '{"preference": "A"}'},
]
PREFERS_FIRST = [{"match": START_A, "reply": 'Sure: ```json\n{"preference": "A"}\n```'}]


def _candidate_reply(i: int) -> str:
    return f"GOOD answer {i}" if i in GOOD else "meh" if i in SAME else f"BAD answer {i}"


@pytest.fixture(scope="module")
def targets() -> Iterator[dict[str, ServerProcess]]:
    rules = {
        "base": [{"match": "Q", "reply": "meh"}],
        "cand": [{"match": f"Q{i:02d}", "reply": _candidate_reply(i)} for i in range(N)],
    }
    with contextlib.ExitStack() as running:
        yield {name: running.enter_context(ServerProcess(rules=r)) for name, r in rules.items()}


def _config(data: Path, targets: dict[str, ServerProcess], judge: ServerProcess) -> dict[str, Any]:
    return {
        "dataset": {"path": str(data)},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "targets": [
            {"name": name, "model": {"url": server.base_url, "name": "m", "format": "openai"}}
            for name, server in targets.items()
        ],
        "metrics": [
            {
                "type": "llm-judge",
                "name": "duel",
                "pairwise": True,
                "model": {"url": judge.base_url, "name": "judge", "format": "openai"},
            }
        ],
    }


def _target(result: CliResult, name: str) -> CliResult:
    return CliResult(result.code, result.stdout, result.stderr, result.output / "targets" / name)


def _judge_prompts(judge: ServerProcess) -> dict[str, int]:
    return {p: n for p, n in judge.stats()["per_prompt"].items() if START_A in p}


def _run(clean_server, targets, write_jsonl, run_eval, rules) -> tuple[CliResult, dict[str, Any]]:
    clean_server.configure(rules=rules)
    data = write_jsonl([{"id": f"r{i}", "question": f"Q{i:02d}"} for i in range(N)])
    config = _config(data, targets, clean_server)
    result = run_eval(config)
    assert result.code == 0, result.stderr
    return result, config


def test_a_judge_that_prefers_the_better_answer_never_flips(clean_server, targets, write_jsonl, run_eval) -> None:
    result, config = _run(clean_server, targets, write_jsonl, run_eval, PREFERS_BETTER)
    cand, base = _target(result, "cand"), _target(result, "base")
    assert cand.results["pairwise"] == [
        {
            "score": "duel.preference",
            "wins": 8,
            "ties": 2,
            "losses": 2,
            "judged": 10,
            "position_flips": 0,
            "position_flip_rate": 0.0,
        }
    ]
    preference = cand.score("duel.preference")
    assert preference["mean"] == pytest.approx((8 + 0.5 * 2) / N)
    assert {d["label"]: d["count"] for d in preference["rubric_distribution"]} == {"loss": 2, "tie": 2, "win": 8}
    rows = cand.rows
    assert [r["duel.preference.label"] for r in rows] == ["win"] * 8 + ["tie"] * 2 + ["loss"] * 2
    assert [r["duel.position_flip"] for r in rows[:8] + rows[10:]] == [0.0] * 10
    assert all(r["duel.position_flip"] != r["duel.position_flip"] for r in rows[8:10])  # not asked: NaN
    assert json.loads(rows[0]["duel.reply"])["swapped"] == '{"preference": "B"}'
    # The baseline against itself: identical answers, a tie on every row, nothing asked.
    assert base.results["pairwise"] == [
        {
            "score": "duel.preference",
            "wins": 0,
            "ties": N,
            "losses": 0,
            "judged": 0,
            "position_flips": 0,
            "position_flip_rate": None,
        }
    ]
    # Each judged row asked exactly twice, once in each order; the identical ones never.
    prompts = _judge_prompts(clean_server)
    assert len(prompts) == 20 and set(prompts.values()) == {1}
    assert clean_server.stats()["requests"] == 20
    assert cand.results["usage"]["metric_calls"]["by_metric"]["duel"]["requests"] == 20
    assert base.results["usage"].get("metric_calls", {}).get("requests", 0) == 0
    # The leaderboard's comparison sees the candidate's win rate against the baseline's ties.
    comparison = json.loads((result.output / "comparison.json").read_text())
    (against,) = comparison["comparisons"]
    score = next(s for s in against["scores"] if s["name"] == "duel.preference")
    assert (score["n_paired"], score["baseline_mean"], score["candidate_mean"]) == (N, 0.5, 0.75)
    assert (score["improved"], score["regressed"]) == (8, 2)
    assert "duel.preference has no calibration" in score["uncalibrated_judge"]  # never GO: an uncalibrated judge
    flips = next(s for s in against["scores"] if s["name"] == "duel.position_flip")
    assert flips["gated"] is False  # more flips is not better: reported, never gated

    resumed = run_eval(config, "--resume", output=result.output)
    assert resumed.code == 0, resumed.stderr
    assert clean_server.stats()["requests"] == 20  # nothing paid twice
    assert _target(resumed, "cand").results["pairwise"] == cand.results["pairwise"]


def test_a_judge_that_prefers_position_one_flips_on_every_row(clean_server, targets, write_jsonl, run_eval) -> None:
    result, _ = _run(clean_server, targets, write_jsonl, run_eval, PREFERS_FIRST)
    cand = _target(result, "cand")
    assert cand.results["pairwise"] == [
        {
            "score": "duel.preference",
            "wins": 0,
            "ties": N,
            "losses": 0,
            "judged": 10,
            "position_flips": 10,
            "position_flip_rate": 1.0,
        }
    ]
    assert cand.score("duel.preference")["mean"] == pytest.approx(0.5)
    assert cand.score("duel.position_flip")["mean"] == pytest.approx(1.0)
    assert clean_server.stats()["requests"] == 20
    assert set(_judge_prompts(clean_server).values()) == {1}
