"""One rate for every worker through a real redis-server: 2 local processes, a Redis hung mid-run, ACLs, the preflight.

The test server enforces the same per-minute limit the config gives (``quota``, no
headers), so a fleet that sends more than its share is answered 429: the 429 count is
what these tests measure. Each test starts its own redis-server on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
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
    used = {key.split("{")[1].split(":")[0].rstrip("}") for key in redis.keys()}
    assert used == {job, "preflight"}  # per job and endpoint; the preflight ran the script on a key of its own
    assert result.results["config"]["params"]["worker_processes"] is None  # the user's config, as written


def worst_window(stats: dict[str, Any], seconds: int = 5) -> int:
    """The most requests the server admitted in ``seconds`` consecutive seconds of its timeline."""
    counts = [second["requests"] for second in stats["quota"]["timeline"]]
    return max((sum(counts[i : i + seconds]) for i in range(max(1, len(counts) - seconds + 1))), default=0)


@pytest.mark.slow
def test_a_hung_redis_stops_the_run_closed_and_resume_completes_it(
    clean_server: ServerProcess, redis: RedisServer, write_jsonl: Any, model_target: Any, run_eval: Any, tmp_path: Path
) -> None:
    """SIGSTOPped mid-run, Redis hangs: no worker sends past it, the run stops (quota_store), --resume finishes."""
    rows = 150
    clean_server.configure(quota={"requests_per_minute": RPM})
    limit = {"requests_per_minute": RPM, "shared": redis.url, "shared_timeout": 4}
    config = eval_config(write_jsonl, model_target, rows, limit)
    paused = threading.Event()

    def pause_when_busy() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if clean_server.stats()["quota"]["admitted_requests"] >= 40:
                redis.pause()
                paused.set()
                return
            time.sleep(0.05)

    pauser = threading.Thread(target=pause_when_busy, daemon=True)
    pauser.start()
    out = tmp_path / "stopped"
    started = time.monotonic()
    stopped = run_eval(config, *TWO_PROCESSES, output=out)
    elapsed = time.monotonic() - started
    pauser.join(timeout=5)
    assert paused.is_set(), "the run ended before Redis was paused"
    assert stopped.code == 5, stopped.stderr
    assert "lost its shared rate limit's Redis" in stopped.stderr and "--resume" in stopped.stderr
    results = stopped.results
    assert (results["status"], results["complete"], results["stopped"]) == ("stopped", False, "quota_store")
    counts = results["counts"]
    assert counts["ok"] + counts["skipped"] == rows and counts["errors"] == 0, counts
    assert 40 <= counts["ok"] < rows - 20, counts
    statuses = [row["status"] for row in stopped.rows]
    assert sorted(row["row_index"] for row in stopped.rows) == list(range(rows))
    assert statuses.count("skipped") == counts["skipped"]
    stats = clean_server.stats()
    sent = stats["requests"]
    assert stats["by_status"] == {"200": counts["ok"]}, stats["by_status"]  # nothing past the limit, nothing lost
    assert worst_window(stats) <= 1.1 * 5 * RPM / 60, stats["quota"]["timeline"]
    print(f"stopped after {elapsed:.1f} s: {counts['ok']} ok, {counts['skipped']} skipped")

    redis.resume()
    resumed = run_eval(config, *TWO_PROCESSES, "--resume", output=out)
    assert resumed.code == 0, resumed.stderr
    assert resumed.results["complete"] is True and "stopped" not in resumed.results
    assert resumed.results["counts"] == {"rows": rows, "ok": rows, "errors": 0}
    assert clean_server.stats()["requests"] - sent == counts["skipped"]  # only what was not answered
    # A clean run's values, computed independently: the echo answers each question with itself.
    assert resumed.score("exact-match.exact-match")["sum"] == exact_matches(rows)
    assert [row["output_text"] for row in resumed.rows] == [f"answer {i}" for i in range(rows)]


class Blackhole:
    """A port that accepts connections and never answers: a Redis hung for one worker only."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.url = f"redis://127.0.0.1:{self._socket.getsockname()[1]}/0"

    def close(self) -> None:
        self._socket.close()


def test_a_worker_cut_off_from_redis_sends_nothing_while_the_others_draw_the_rate(
    clean_server: ServerProcess, redis: RedisServer
) -> None:
    """Half-down: one of two workers (W=2) cannot reach Redis. It must not fall back to R/2 of its own."""
    clean_server.configure(quota={"requests_per_minute": RPM})
    handler = handler_for(clean_server)
    dead = Blackhole()
    limits = [
        RateLimit(requests_per_minute=RPM, shared=redis.url, shared_key="job"),
        RateLimit(requests_per_minute=RPM, shared=dead.url, shared_key="job", shared_timeout=3),
    ]
    engines = [InferenceEngine(handler, 16, 5, 30.0, quota=EndpointQuota(limit, workers=2)) for limit in limits]
    try:
        request = handler.prepare({"messages": [{"role": "user", "content": "hi"}]})
        futures = [[engine.submit(request, handler) for _ in range(40)] for engine in engines]
        healthy, cut_off = ([future.result(timeout=60) for future in batch] for batch in futures)
    finally:
        for engine in engines:
            engine.close()
        dead.close()
    assert all(outcome.ok for outcome in healthy)
    assert clean_server.stats()["by_status"] == {"200": 40}  # the job's rate, not R (1 + 1/2): no 429
    assert {(o.error.failure_class, o.attempts) for o in cut_off if o.error} == {("quota_store", 0)}
    assert not any(outcome.ok for outcome in cut_off)
    message = str(cut_off[0].error)
    assert dead.url in message and "rate_limit.shared_timeout" in message and "--resume" in message


@pytest.fixture
def acl_users(redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> RedisServer:
    """Two ACL users with the password in REDIS_PASSWORD: ``evals`` may run the scripts, ``noscripts`` may not."""
    admin = redis.admin()
    admin.acl_setuser(
        "evals",
        enabled=True,
        passwords=["+s3cret-pw"],
        keys=["beameval:rate:*"],
        commands=["+evalsha", "+script|load", "+time", "+get", "+set"],
    )
    admin.acl_setuser("noscripts", enabled=True, passwords=["+s3cret-pw"], keys=["*"], commands=["+@read", "+@write"])
    monkeypatch.setenv("REDIS_PASSWORD", "s3cret-pw")
    return redis


def acl_limit(redis: RedisServer, user: str) -> dict[str, Any]:
    url = redis.url.replace("redis://", f"redis://{user}@")
    return {"requests_per_minute": RPM, "shared": url, "shared_password_env": "REDIS_PASSWORD"}


def test_an_acl_user_named_in_the_url_draws_from_redis(
    clean_server: ServerProcess, acl_users: RedisServer, write_jsonl: Any, model_target: Any, run_eval: Any
) -> None:
    result = run_eval(eval_config(write_jsonl, model_target, 12, acl_limit(acl_users, "evals")))
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 12, "ok": 12, "errors": 0}
    job = json.loads((result.output / "_responses" / "job.json").read_text())["id"]
    assert f"beameval:rate:{{{job}:" in " ".join(acl_users.run_keys())  # the user's script ran in the workers
    outputs = result.stdout + result.stderr + (result.output / "results.json").read_text()
    assert "s3cret-pw" not in outputs


def test_an_acl_that_refuses_the_script_fails_the_preflight_naming_the_fix(
    clean_server: ServerProcess, acl_users: RedisServer, write_jsonl: Any, model_target: Any, run_eval: Any
) -> None:
    result = run_eval(eval_config(write_jsonl, model_target, 5, acl_limit(acl_users, "noscripts")))
    assert result.code == 2, result.stderr
    assert "refused the rate-limit script to user 'noscripts'" in result.stderr, result.stderr
    assert "ACL SETUSER noscripts +evalsha +script|load +time +get +set ~beameval:rate:*" in result.stderr
    assert "s3cret-pw" not in result.stderr and "Traceback" not in result.stderr
    assert clean_server.stats()["requests"] == 0
    assert not (result.output / "results.json").exists()


def test_a_wrong_redis_password_fails_the_preflight(
    clean_server: ServerProcess,
    acl_users: RedisServer,
    write_jsonl: Any,
    model_target: Any,
    run_eval: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_PASSWORD", "not-the-pw")
    result = run_eval(eval_config(write_jsonl, model_target, 5, acl_limit(acl_users, "evals")))
    assert result.code == 2, result.stderr
    assert "refused the credentials of user 'evals' (password from the variable REDIS_PASSWORD)" in result.stderr
    assert "not-the-pw" not in result.stderr
    assert clean_server.stats()["requests"] == 0


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
