"""One rate for every worker through a real redis-server: 2 local processes, a Redis killed mid-run, the preflight.

The test server enforces the same per-minute limit the config gives (``quota``, no
headers), so a fleet that sends more than its share is answered 429: the 429 count is
what these tests measure. Each test starts its own redis-server on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from beameval.config.quota import RateLimit
from beameval.inference.engine import InferenceEngine
from beameval.inference.quota import EndpointQuota
from beameval.testserver.harness import ServerProcess, free_port
from tests.quota.redis_server import RedisServer, redis_server
from tests.quota.test_pacing_engine import handler_for

TWO_PROCESSES = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
RPM = 600  # 10 requests a second for the whole job


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


def eval_config(write_jsonl: Any, model_target: Any, rows: int, rate_limit: dict[str, Any] | None) -> dict[str, Any]:
    data = [{"question": f"answer {i}", "answer": f"answer {i % 3}"} for i in range(rows)]
    return {
        "dataset": {"path": str(write_jsonl(data))},
        "target": model_target(**({"rate_limit": rate_limit} if rate_limit else {})),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 32, "max_retries": 6, "inference": {"max_tokens": 4}},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


def exact_matches(rows: int) -> float:
    return float(sum(1 for i in range(rows) if i % 3 == i))


def test_two_engines_draw_from_one_shared_budget(clean_server: ServerProcess, redis: RedisServer) -> None:
    """Two engines named into one budget (shared_key) send R between them, not 2 R: the GCRA script is shared."""
    clean_server.configure(quota={"requests_per_minute": RPM})
    limit = RateLimit(requests_per_minute=RPM, shared=redis.url, shared_key="both")
    handler = handler_for(clean_server)
    engines = [InferenceEngine(handler, 16, 5, 30.0, quota=EndpointQuota(limit, job=f"job{i}")) for i in range(2)]
    try:
        request = handler.prepare({"messages": [{"role": "user", "content": "hi"}]})
        started = time.monotonic()
        futures = [engine.submit(request, handler) for engine in engines for _ in range(20)]
        outcomes = [future.result(timeout=60) for future in futures]
        elapsed = time.monotonic() - started
    finally:
        for engine in engines:
            engine.close()
    assert all(outcome.ok for outcome in outcomes)
    assert clean_server.stats()["by_status"] == {"200": 40}
    assert elapsed >= (40 - 5 - 1) / 10  # one budget: 10 a second after half a second of burst
    assert redis.keys() == ["beameval:rate:{both}:requests"]


@pytest.mark.slow
def test_two_processes_share_the_rate_through_redis(
    clean_server: ServerProcess, redis: RedisServer, write_jsonl: Any, model_target: Any, run_eval: Any
) -> None:
    clean_server.configure(quota={"requests_per_minute": RPM})
    config = eval_config(write_jsonl, model_target, 80, {"requests_per_minute": RPM, "shared": redis.url})
    result = run_eval(config, *TWO_PROCESSES)
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 80, "ok": 80, "errors": 0}
    assert result.score("exact-match.exact-match")["sum"] == exact_matches(80)
    stats = clean_server.stats()
    assert stats["by_status"] == {"200": 80}, stats["by_status"]  # never past the limit: no 429
    job = json.loads((result.output / "_responses" / "job.json").read_text())["id"]  # kept across --resume
    assert [key.split("{")[1].split(":")[0] for key in redis.keys()] == [job]  # per job and endpoint
    assert result.results["config"]["params"]["worker_processes"] is None  # the user's config, as written


@pytest.mark.slow
def test_a_redis_that_dies_mid_run_leaves_each_worker_its_share(
    clean_server: ServerProcess, redis: RedisServer, write_jsonl: Any, model_target: Any, run_eval: Any
) -> None:
    """Killed mid-run, Redis stops answering: each of the 2 workers falls back to R/2 and the run completes."""
    clean_server.configure(quota={"requests_per_minute": RPM})
    config = eval_config(write_jsonl, model_target, 120, {"requests_per_minute": RPM, "shared": redis.url})
    killed = threading.Event()

    def kill_when_busy() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if clean_server.stats()["quota"]["admitted_requests"] >= 30:
                redis.kill()
                killed.set()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_busy, daemon=True)
    killer.start()
    result = run_eval(config, *TWO_PROCESSES)
    killer.join(timeout=5)
    assert killed.is_set(), "the run ended before Redis was killed"
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 120, "ok": 120, "errors": 0}
    assert result.score("exact-match.exact-match")["sum"] == exact_matches(120)
    stats = clean_server.stats()
    # R/2 each keeps the job under R: at most the two workers' half-second bursts as they switch over.
    assert stats["by_status"].get("429", 0) <= 6, stats["by_status"]


def test_an_unreachable_redis_fails_the_preflight(
    clean_server: ServerProcess, write_jsonl: Any, model_target: Any, run_eval: Any
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    result = run_eval(eval_config(write_jsonl, model_target, 5, {"requests_per_minute": RPM, "shared": url}))
    assert result.code == 2
    assert "cannot reach the Redis server that target.model.rate_limit.shared names" in result.stderr
    assert url in result.stderr and "Traceback" not in result.stderr
    assert clean_server.stats()["requests"] == 0
    assert not (result.output / "results.json").exists()
