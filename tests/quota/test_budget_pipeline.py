"""params.budget end to end: a run stopped at 40% of what it needs, its --resume, and costs from pricing."""

from __future__ import annotations

from typing import Any

import pytest

from beameval.testserver.harness import ServerProcess

ROWS = 60
#: The echo answers each prompt ("answer 17") with itself: 2 prompt + 2 completion tokens a row.
NEEDED = ROWS * 4
PARALLELISM = 8


def budget_config(write_jsonl: Any, model_target: Any, budget: dict[str, Any] | None) -> dict[str, Any]:
    data = [{"question": f"answer {i}", "answer": f"answer {i % 4}"} for i in range(ROWS)]
    params: dict[str, Any] = {"parallelism": PARALLELISM, "inference": {"max_tokens": 4}}
    if budget is not None:
        params["budget"] = budget
    return {
        "dataset": {"path": str(write_jsonl(data))},
        "target": model_target(pricing={"input_per_million": 2.0, "output_per_million": 8.0}),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": params,
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}"},
            {"type": "bleu", "references": ["{{ item.answer }}"]},
        ],
    }


def tokens_of(results: dict[str, Any]) -> int:
    usage = results["usage"]
    return usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.slow
def test_a_budget_stops_the_run_and_a_resume_with_a_larger_one_completes_it(
    clean_server: ServerProcess, write_jsonl: Any, model_target: Any, run_eval: Any, tmp_path: Any
) -> None:
    limit = int(NEEDED * 0.4)
    out = tmp_path / "budgeted"
    stopped = run_eval(budget_config(write_jsonl, model_target, {"max_tokens": limit}), output=out)
    assert stopped.code == 5, stopped.stderr
    assert "reached its budget" in stopped.stderr and "--resume" in stopped.stderr
    results = stopped.results
    assert (results["status"], results["complete"], results["stopped"]) == ("stopped", False, "budget")
    rows = stopped.rows
    assert sorted(row["row_index"] for row in rows) == list(range(ROWS))  # every row exactly once
    statuses = [row["status"] for row in rows]
    ok, skipped = statuses.count("ok"), statuses.count("skipped")
    assert ok + skipped == ROWS and ok > 0 and skipped > 0
    assert results["counts"] == {"rows": ROWS, "ok": ok, "errors": 0, "skipped": skipped}
    assert stopped.errors == []  # skipped rows are not failures
    assert all(
        row["exact-match.exact-match"] != row["exact-match.exact-match"] for row in rows if row["status"] == "skipped"
    )
    # Reserved at their estimate (3 + 4 a row) while in flight, so what was used stays under the cap.
    used = tokens_of(results)
    assert used == 4 * ok
    assert used <= limit
    assert ok >= (limit - 7) // 4  # it stopped at the budget, not long before it
    spent_usd = (2.0 * used / 2 + 8.0 * used / 2) / 1e6
    assert results["usage"]["budget"] == {
        "max_tokens": limit,
        "max_usd": None,
        "spent_tokens": used,
        "spent_usd": pytest.approx(spent_usd),
    }
    print(f"budget {limit} of {NEEDED} tokens: {ok} rows answered ({used} tokens), {skipped} skipped")
    em = stopped.score("exact-match.exact-match")
    assert em["count"] + em["nan_count"] == ok  # the aggregates cover the rows evaluated

    sent_before = clean_server.stats()["requests"]
    resumed = run_eval(budget_config(write_jsonl, model_target, {"max_tokens": 10 * NEEDED}), "--resume", output=out)
    assert resumed.code == 0, resumed.stderr
    assert clean_server.stats()["requests"] - sent_before == skipped  # only what was not answered
    assert resumed.results["complete"] is True and "stopped" not in resumed.results
    assert resumed.results["counts"] == {"rows": ROWS, "ok": ROWS, "errors": 0}
    assert resumed.results["usage"]["budget"]["spent_tokens"] == NEEDED  # both runs together

    clean = run_eval(budget_config(write_jsonl, model_target, None))
    assert clean.code == 0, clean.stderr
    assert resumed.results["aggregate_scores"] == clean.results["aggregate_scores"]
    assert [r["output_text"] for r in resumed.rows] == [r["output_text"] for r in clean.rows]
    # pricing: 2 $ per million prompt tokens and 8 $ per million completion tokens, by hand.
    usage = clean.results["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (NEEDED // 2, NEEDED // 2)
    expected = (2.0 * 120 + 8.0 * 120) / 1e6
    assert usage["cost_usd"] == {"total": pytest.approx(expected), "endpoints": {"target": pytest.approx(expected)}}
    assert "cost" in clean.stdout
