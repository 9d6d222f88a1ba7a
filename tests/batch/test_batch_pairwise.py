"""A pairwise judge in batch mode: both orders of each row go through the test server's Batch API, none online.

The same two targets and judge rules as tests/pipeline/test_judge_pairwise.py; the verdicts
must be the online ones, each judged row must be one line of the first order's batches and
one of the swapped order's, and the tokens and cost count once, under the judge's key.
"""

from __future__ import annotations

import pytest

from beameval.testserver.harness import ServerProcess
from tests.pipeline.test_judge_pairwise import (  # noqa: F401 - targets: a fixture
    PREFERS_BETTER,
    SAME,
    N,
    _config,
    _target,
    targets,
)


def test_a_pairwise_judge_in_batch_mode_sends_both_orders_as_batch_lines(
    clean_server: ServerProcess,
    targets: dict[str, ServerProcess],  # noqa: F811 - the imported fixture
    write_jsonl,
    run_eval,
) -> None:
    clean_server.batches(validating_s=0.0, completion_s=0.0, outcomes=[])
    clean_server.configure(rules=PREFERS_BETTER)
    config = _config(write_jsonl([{"question": f"Q{i:02d}"} for i in range(N)]), targets, clean_server)
    (judge,) = config["metrics"]
    judge["model"] |= {
        "mode": "batch",
        "batch": {"max_requests": 4, "poll_interval": 0.2},
        "pricing": {"input_per_million": 2.0, "output_per_million": 8.0, "batch_discount": 0.5},
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    (record,) = _target(result, "cand").results["pairwise"]
    assert (record["wins"], record["ties"], record["losses"], record["judged"]) == (8, 2, 2, 10)
    assert record["position_flip_rate"] == 0.0
    assert clean_server.stats()["requests"] == 0  # no judge call online
    ids = sorted(cid for batch in clean_server.batches()["batches"] for cid in batch["custom_ids"])
    judged = [i for i in range(N) if i not in SAME]
    assert ids == sorted(f"duel{order}-row-{i}-sample-0" for i in judged for order in ("", ".swapped"))
    assert clean_server.batches()["lines_answered"] == 2 * len(judged)
    usage = _target(result, "cand").results["usage"]
    calls = usage["metric_calls"]["by_metric"]["duel"]
    assert calls["requests"] == 2 * len(judged) and calls["batch"]["requests"] == 2 * len(judged)
    assert (calls["batch"]["prompt_tokens"], calls["batch"]["completion_tokens"]) == (
        calls["prompt_tokens"],
        calls["completion_tokens"],
    )
    full = (calls["prompt_tokens"] * 2.0 + calls["completion_tokens"] * 8.0) / 1e6
    assert usage["cost_usd"]["endpoints"]["metric:duel"] == pytest.approx(full / 2, abs=1e-6)  # all batch-priced
