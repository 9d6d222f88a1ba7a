"""The response store on the other local runners: PortableRunner (LOOPBACK workers) and 2 local processes.

The same outcomes as on the default runner (tests/pipeline/test_resume_pipeline.py): the
first run sends every request and fills the store; the second, on the same runner, sends
none (the test server counts them), marks every row ``cached`` and gives the first run's
scores and ``rows/``. The job service and the loopback-only gRPC binds are
tests/pipeline/test_runners.py's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.test_runners import grpc_binds, job_service  # noqa: F401 - fixtures, used by name

ROWS = 80
# Every third row's reference differs from the echoed prompt: exact-match is 0 there, 1 elsewhere.
DATA = [
    {"question": f"runner question {i}", "answer": f"runner question {i}" if i % 3 else "other"} for i in range(ROWS)
]
EXACT = sum(1 for i in range(ROWS) if i % 3)


def config_for(path: Path, target: dict[str, Any], store: Path) -> dict[str, Any]:
    return {
        "dataset": {"path": str(path)},
        "target": target,
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, "max_retries": 1, "inference": {"temperature": 0}},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
        "cache": {"path": str(store)},
    }


def by_row(result) -> list[tuple[Any, ...]]:
    return sorted(
        (r["row_index"], r["status"], r["output_text"], r["request_hash"], r["exact-match.exact-match"])
        for r in result.rows
    )


def assert_second_run_answered_from_the_store(clean_server, run_eval, config: dict[str, Any], *runner: str) -> None:
    first = run_eval(config, *runner)
    assert first.code == 0, first.stderr
    assert clean_server.stats()["requests"] == ROWS
    assert first.results["usage"]["cache"] == {"hits": 0, "misses": ROWS}
    em = first.score("exact-match.exact-match")
    assert (em["count"], em["nan_count"], em["sum"], em["mean"]) == (ROWS, 0, EXACT, EXACT / ROWS)

    clean_server.reset()
    second = run_eval(config, *runner)
    assert second.code == 0, second.stderr
    assert clean_server.stats()["requests"] == 0
    assert second.results["usage"]["cache"] == {"hits": ROWS, "misses": 0}
    assert second.results["usage"]["requests"] == 0
    assert second.results["aggregate_scores"] == first.results["aggregate_scores"]
    assert by_row(second) == by_row(first)
    assert all(r["cached"] and r["attempts"] == 0 for r in second.rows)


@pytest.mark.slow
def test_portable_runner_answers_a_second_run_from_the_store(
    clean_server,
    model_target,
    write_jsonl,
    run_eval,
    tmp_path,
    job_service,  # noqa: F811 - the imported fixture
):
    config = config_for(write_jsonl(DATA), model_target(), tmp_path / "store")
    portable = ("--runner=PortableRunner", f"--job_endpoint={job_service}", "--environment_type=LOOPBACK")
    assert_second_run_answered_from_the_store(clean_server, run_eval, config, *portable)


@pytest.mark.slow
def test_two_local_processes_answer_a_second_run_from_the_store(
    clean_server, model_target, write_jsonl, run_eval, tmp_path
):
    config = config_for(write_jsonl(DATA), model_target(), tmp_path / "store")
    two = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert_second_run_answered_from_the_store(clean_server, run_eval, config, *two)
    # Written by the two worker processes, each to its own shards (and the driver's preflight, its one
    # answer), and added to the store by the driver; the second run, answered from the store, added nothing.
    shards = list((tmp_path / "store" / "entries").glob("*.jsonl"))
    entries = [json.loads(line) for shard in shards for line in shard.read_text().splitlines()]
    assert len(entries) == ROWS and len({e["key"] for e in entries}) == ROWS
    writers = {shard.name.split("-")[1] for shard in shards} - {str(os.getpid())}  # <time>-<pid>-<random>-<seq>
    assert len(writers) == 2
