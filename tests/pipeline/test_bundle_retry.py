"""A paid answer is never paid again in the same run: Beam retries a bundle after its requests were answered.

``BundleBasedDirectRunner`` retries a failed bundle (up to 4 times,
``apache_beam/runners/direct/executor.py``), as Dataflow and Flink do after a failure
later in a fused stage or a lost worker. A crash point fails each bundle of the sending
stage once, after every request of the bundle was answered and journalled
(``BEAMEVAL_CRASH_AT=generate-bundle-answered``, ``metric-calls-answered``); the retry
must answer those rows from the journal. The test server counts the requests it receives
per prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from beameval.core.crash_points import CRASH_ENV
from tests.conftest import CliResult

ROWS = 120
RETRYING = ("--runner=BundleBasedDirectRunner", "--progress_interval", "0")
JUDGE_RULES = [{"match": "JUDGE:", "reply": '{"confidence": 4}'}]


def _config(data: Path, target: dict[str, Any], judge_url: str | None = None) -> dict[str, Any]:
    metrics: list[dict[str, Any]] = [{"type": "exact-match", "reference": "{{ item.answer }}"}]
    if judge_url is not None:
        metrics.append(
            {
                "type": "llm-judge",
                "model": {"url": judge_url, "name": "judge", "format": "openai"},
                "prompt_template": {"messages": [{"role": "user", "content": "JUDGE: {{ sample.output_text }}"}]},
                "scores": [{"name": "confidence", "minimum": 1, "maximum": 5}],
            }
        )
    return {
        "dataset": {"path": str(data)},
        "target": target,
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, "max_retries": 0},
        "metrics": metrics,
    }


def _data(write_jsonl) -> Path:
    return write_jsonl([{"question": f"question {i}", "answer": f"question {i}"} for i in range(ROWS)])


def _every_row_once(result: CliResult) -> None:
    assert result.code == 0, result.stderr
    assert sorted(r["row_index"] for r in result.rows) == list(range(ROWS))
    assert all(r["status"] == "ok" for r in result.rows)
    assert result.score("exact-match.exact-match")["mean"] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("point", ["generate-bundle-answered", "metric-calls-answered"])
def test_a_retried_bundle_sends_no_answered_request_again(
    point, clean_server, server, model_target, write_jsonl, run_eval, monkeypatch
):
    clean_server.configure(rules=JUDGE_RULES)
    config = _config(_data(write_jsonl), model_target(), server.base_url)
    monkeypatch.setenv(CRASH_ENV, point)
    result = run_eval(config, *RETRYING)
    _every_row_once(result)
    stats = clean_server.stats()
    per_prompt = stats["per_prompt"]
    print(f"\n{point}: {stats['requests']} requests for {2 * ROWS} calls, max per prompt {max(per_prompt.values())}")
    counters = result.results["run"]["counters"]  # the stage did fail, and its retry found the answers
    hits = counters.get("journal_hits" if point.startswith("generate") else "metric_journal_hits", 0)
    assert hits >= ROWS - 1  # the preflight's row is answered from its own reply, unsent
    assert stats["requests"] == 2 * ROWS  # each row's target call and judge call, once
    assert set(per_prompt.values()) == {1}
    usage = result.results["usage"]
    # Every request sent is counted once, by the row it was sent for (the retry's rows carry it).
    assert (usage["requests"], usage["cache"]["hits"]) == (ROWS, 0)
    assert (usage["metric_calls"]["requests"], usage["metric_calls"]["cache"]["hits"]) == (ROWS, 0)
    assert result.score("llm-judge.confidence")["mean"] == 4.0
    assert json.loads((result.output / "results.json").read_text())["counts"]["rows"] == ROWS
