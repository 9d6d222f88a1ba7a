"""An endpoint that limits requests per minute and says nothing but 429: the run learns the rate and completes.

Measured on the release before rates were learnt (the same run, no ``rate_limit``, no
``x-ratelimit-*`` headers, ``parallelism`` 64): 1,429 answers were 429 and 332 of 400 rows
failed after their retries. The test server enforces 1,200 requests a minute with one
second of burst; what it counts is what the assertions read.
"""

from __future__ import annotations

from typing import Any

import pytest

from beameval.testserver.harness import ServerProcess

ROWS = 400
RPM = 1200


@pytest.mark.slow
def test_429s_alone_teach_the_run_its_rate(
    clean_server: ServerProcess, write_jsonl: Any, model_target: Any, run_eval: Any
) -> None:
    clean_server.configure(latency_ms=50, quota={"requests_per_minute": RPM})  # 429 + Retry-After, no headers
    data = [{"question": f"answer {i}", "answer": f"answer {i % 5}"} for i in range(ROWS)]
    config = {
        "dataset": {"path": str(write_jsonl(data))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 64, "inference": {"max_tokens": 4}},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": ROWS, "ok": ROWS, "errors": 0}
    assert result.score("exact-match.exact-match")["sum"] == sum(1 for i in range(ROWS) if i % 5 == i)
    stats = clean_server.stats()
    refused = stats["by_status"].get("429", 0)
    print(f"{ROWS} rows, {stats['requests']} requests, {refused} answered 429 ({refused / stats['requests']:.1%})")
    assert stats["by_status"]["200"] == ROWS  # each row answered once
    assert refused < 0.1 * stats["requests"], stats["by_status"]
