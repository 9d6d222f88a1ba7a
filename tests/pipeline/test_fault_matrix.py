"""The fault matrix (Reliability issue): every failure the endpoint can throw, end to end.

Each test runs the real CLI in-process against its own test server (so fault settings,
its random sequence and its statistics belong to that test alone) over a dataset of
distinct prompts whose replies are scripted, so exact-match scores are known. Every test
checks the same invariants (``check_run``): each input row exactly once in ``rows/``,
failed rows in ``errors/`` with phase, HTTP status and cause, no prompt requested more
than ``max_retries + 1`` times, counts and per-score ``count + nan_count`` reconciled,
and exact scores for ok rows.

Random faults are drawn by the server from one seeded generator, one draw per request
and per non-zero rate, in arrival order. Arrival order varies from run to run, but as
long as every row succeeds the run stops at the n-th successful draw, so the number of
injected faults is a function of the seed alone (``faults_before``): tests assert it
exactly. Seeds are chosen so that no row can run out of retries whatever the order
(see each test).
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from beameval.testserver.harness import ServerProcess
from transforms.generate import GenerateSamples

N = 40
EM = "exact-match.exact-match"
F1 = "f1.f1"
SCORES = (EM, F1)
METRICS = [
    {"type": "exact-match", "reference": "{{ item.answer }}"},
    {"type": "f1", "reference": "{{ item.answer }}"},
]


def dataset(n: int = N) -> list[dict[str, Any]]:
    """Distinct prompts; no prompt is a substring of another (rules match substrings)."""
    return [{"id": i, "question": f"<q{i:03d}> what is the code word?", "answer": f"word {i:03d}"} for i in range(n)]


def prompt(row: dict[str, Any]) -> str:
    return row["question"]


def wrong(i: int) -> bool:
    """Rows whose scripted reply is wrong (exact-match 0, f1 0)."""
    return i % 4 == 3


def reply_for(i: int) -> str:
    return f"nothing {i:03d}x" if wrong(i) else f"word {i:03d}"


def reply_rules(rows: list[dict[str, Any]], skip: set[int] = frozenset()) -> list[dict[str, Any]]:
    return [{"match": f"<q{r['id']:03d}>", "reply": reply_for(r["id"])} for r in rows if r["id"] not in skip]


def faults_before(seed: int, rate: float, n: int) -> int:
    """Faults the server injects (one draw per request) before its n-th clean answer."""
    rng = random.Random(seed)
    ok = faults = 0
    while ok < n:
        if rng.random() < rate:
            faults += 1
        else:
            ok += 1
    return faults


def fault_rounds(seed: int, rate: float, n: int) -> list[int]:
    """Faults per retry round when rounds do not overlap: [first attempts, first retries, …]."""
    rng = random.Random(seed)
    rounds, pending = [], n
    while pending:
        pending = sum(rng.random() < rate for _ in range(pending))
        rounds.append(pending)
    return rounds


@pytest.fixture
def start_server():
    """Start a fresh test server per scenario (own faults, seed, stats); stop them all afterwards."""
    started: list[ServerProcess] = []

    def start(*, launch: bool = True, **kwargs: Any) -> ServerProcess:
        server = ServerProcess(**kwargs)
        started.append(server)
        return server.start() if launch else server

    yield start
    for server in started:
        server.stop()


def eval_config(path: Path, server: ServerProcess, **params: Any) -> dict[str, Any]:
    return {
        "dataset": {"path": str(path)},
        "target": {"model": {"url": server.base_url, "name": "fault-matrix", "format": "openai"}},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        # These scenarios check how failures are recorded, not the run's error-rate limit (default 0.5): allow all.
        "params": {
            "parallelism": 16,
            "max_retries": 5,
            "ignore_request_failure": True,
            "max_error_rate": 1.0,
            **params,
        },
        "metrics": METRICS,
    }


def check_run(
    result: Any,
    server: ServerProcess | None,
    rows: list[dict[str, Any]],
    *,
    max_retries: int,
    failed: dict[int, str] | None = None,
    server_sees_every_attempt: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Assert the invariants every fault scenario must keep; return (rows/ records, server stats).

    Args:
        failed: row_index -> a substring the cause must contain, for the rows that must fail.
        server: the test server, or None when nothing ever listened (no server-side checks).
        server_sees_every_attempt: False when some attempts never reach the server (refused).
    """
    failed = failed or {}
    n = len(rows)
    assert result.code == 0, result.stderr
    out_rows = result.rows
    # Every input row exactly once.
    assert [r["row_index"] for r in out_rows] == list(range(n))
    assert {r["row_index"] for r in out_rows if r["status"] == "error"} == set(failed)
    counts = result.results["counts"]
    assert counts == {"rows": n, "ok": n - len(failed), "errors": len(failed)}
    # errors/: one record per failed row, with phase, cause and the row itself.
    errors = result.errors
    assert [e["row_index"] for e in errors] == sorted(failed)
    for record in errors:
        index = record["row_index"]
        assert record["phase"] == "sample_generation" and record["metric"] is None
        assert failed[index] in record["error"], record
        assert json.loads(record["item"]) == rows[index]
        assert out_rows[index]["error"] == record["error"]
        assert record["attempts"] == out_rows[index]["attempts"]
        assert record["http_status"] == out_rows[index]["http_status"]
    # Scores: NaN on failed rows, exact on ok rows; aggregates reconcile.
    ok_rows = [r for r in out_rows if r["status"] == "ok"]
    for r in out_rows:
        if r["status"] == "error":
            assert r["output_text"] is None and all(math.isnan(r[s]) for s in SCORES)
        else:
            expected = 0.0 if wrong(r["row_index"]) else 1.0
            assert r["output_text"] == reply_for(r["row_index"])
            assert (r[EM], r[F1]) == (expected, expected), r
            assert r["http_status"] == 200 and r["error"] is None
    for name in SCORES:
        score = result.score(name)
        assert (score["count"], score["nan_count"]) == (len(ok_rows), len(failed))
        assert score["count"] + score["nan_count"] == n
        expected_sum = sum(0.0 if wrong(r["row_index"]) else 1.0 for r in ok_rows)
        assert score["sum"] == (expected_sum if ok_rows else None)  # no values: null, not 0
    # Retries: never more than max_retries + 1 requests per prompt.
    for r in out_rows:
        assert 1 <= r["attempts"] <= max_retries + 1
    usage = result.results["usage"]
    assert usage["requests"] == n and usage["attempts"] == sum(r["attempts"] for r in out_rows)
    if server is None:  # nothing ever listened
        return out_rows, {}
    stats = server.stats()
    per_prompt = stats["per_prompt"]
    assert set(per_prompt) <= {prompt(r) for r in rows}
    assert max(per_prompt.values(), default=0) <= max_retries + 1
    if server_sees_every_attempt:
        for r in out_rows:
            assert per_prompt.get(prompt(rows[r["row_index"]]), 0) == r["attempts"], r
        assert stats["requests"] == sum(r["attempts"] for r in out_rows)
    return out_rows, stats


def aimd(result: Any) -> tuple[int, int, int]:
    """(limit decreases, concurrency limit at the end, peak in flight), from the run's Beam metrics."""
    run = result.results["run"]
    gauges = run["gauges"]
    return run["counters"].get("limit_decreases", 0), gauges["concurrency_limit"], gauges["peak_in_flight"]


# 1. 503 storm with Retry-After ------------------------------------------------------------------


def test_503_storm_with_retry_after_all_rows_succeed(start_server, write_jsonl, run_eval):
    # Seed 18 at 30 %: 13 of the 40 first attempts fail, then 3 of the 13 first retries, then
    # none: rounds are kept apart by the 0.2 s Retry-After, so no row needs more than 3 of its
    # 6 attempts. 16 503s in all, whatever the order.
    seed, rate, retry_after = 18, 0.3, 0.2
    assert fault_rounds(seed, rate, N) == [13, 3, 0]
    rows = dataset()
    server = start_server(
        error_rate=rate, error_status=503, retry_after=retry_after, seed=seed, rules=reply_rules(rows)
    )
    config = eval_config(write_jsonl(rows), server, max_retries=5)
    started = time.perf_counter()
    result = run_eval(config)
    elapsed = time.perf_counter() - started
    out_rows, stats = check_run(result, server, rows, max_retries=5)
    assert stats["by_status"] == {"200": N, "503": 16}
    attempts = sorted(r["attempts"] for r in out_rows)
    assert attempts == [1] * 27 + [2] * 10 + [3] * 3
    for r in out_rows:  # every retry waited at least the Retry-After
        assert r["latency_ms"] >= 1000 * retry_after * (r["attempts"] - 1), r
    assert elapsed >= 2 * retry_after
    assert aimd(result)[0] >= 1  # 503 is an overload signal: AIMD backed off


# 1b. Other retryable statuses, retried out -------------------------------------------------------


def test_retryable_statuses_are_retried_until_max_retries(start_server, write_jsonl, run_eval):
    rows = dataset()
    scripted = {  # row -> (status, failures before it answers)
        2: (500, 2),
        5: (502, 1),
        8: (504, 3),
        11: (408, 1),
        14: (429, 2),
        20: (500, 9),
        23: (503, 9),  # never within 1 + 3 attempts
    }
    rules = [
        {"match": f"<q{i:03d}>", "reply": reply_for(i), "status": status, "fail_times": times, "retry_after": 0}
        for i, (status, times) in scripted.items()
    ]
    server = start_server(rules=rules + reply_rules(rows, skip=set(scripted)))
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=3))
    failed = {20: "request failed after 4 attempts: HTTP 500", 23: "request failed after 4 attempts: HTTP 503"}
    out_rows, stats = check_run(result, server, rows, max_retries=3, failed=failed)
    expected_statuses = {"200": N - len(failed)}
    for i, (status, times) in scripted.items():
        assert out_rows[i]["attempts"] == min(times + 1, 4)
        expected_statuses[str(status)] = expected_statuses.get(str(status), 0) + min(times, 4)
    assert stats["by_status"] == expected_statuses
    assert (out_rows[20]["http_status"], out_rows[23]["http_status"]) == (500, 503)
    assert "lower params.parallelism" in out_rows[23]["error"]  # an overload failure says what to do
    assert sum(r["attempts"] for r in out_rows) == N + 2 + 1 + 3 + 1 + 2 + 3 + 3


# 2. Capacity 429s --------------------------------------------------------------------------------


def test_capacity_429s_all_rows_succeed_within_parallelism(start_server, write_jsonl, run_eval):
    rows = dataset(60)
    server = start_server(capacity=4, latency_ms=50, retry_after=0.1, rules=reply_rules(rows))
    # No preflight, so every connection the server counts is the client pool's (+ the harness's).
    config = eval_config(write_jsonl(rows), server, parallelism=16, max_retries=10)
    result = run_eval(config, "--skip_preflight")
    out_rows, stats = check_run(result, server, rows, max_retries=10)
    assert set(stats["by_status"]) <= {"200", "429"} and stats["by_status"]["200"] == 60
    assert stats["peak_in_flight"] <= 4  # the server's own gate
    assert stats["connections"] <= 16 + 1  # 429s keep the connection: at most parallelism sockets
    decreases, _, peak = aimd(result)
    assert peak <= 16 and decreases >= 1  # AIMD backed off
    for r in out_rows:
        assert r["latency_ms"] >= 50 + 100 * (r["attempts"] - 1) - 1, r


# 3. Stalls past request_timeout ------------------------------------------------------------------


def test_stalls_past_request_timeout_are_retried(start_server, write_jsonl, run_eval):
    # Seed 2 at 20 %: 8 of the first 40 attempts stall, then 1 of their 8 retries, then none;
    # rounds are 0.5 s (the timeout) apart, so every row succeeds within 3 of its 4 attempts.
    seed, rate, stall_s, timeout = 2, 0.2, 5.0, 0.5
    assert fault_rounds(seed, rate, N) == [8, 1, 0]
    rows = dataset()
    server = start_server(stall_rate=rate, stall_s=stall_s, seed=seed, rules=reply_rules(rows))
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=3, request_timeout=timeout))
    out_rows, stats = check_run(result, server, rows, max_retries=3)
    assert stats["requests"] == N + 9
    assert sorted(r["attempts"] for r in out_rows) == [1] * 32 + [2] * 7 + [3]
    for r in out_rows:  # each stalled attempt was cut at the timeout, not at stall_s
        assert 1000 * timeout * (r["attempts"] - 1) <= r["latency_ms"] < 1000 * stall_s, r


def test_timeouts_past_max_retries_are_recorded_with_a_cause(start_server, write_jsonl, run_eval):
    rows = dataset(20)
    timeout, stall_s = 0.5, 30.0
    server = start_server(stall_rate=1.0, stall_s=stall_s, rules=reply_rules(rows))
    # Every request times out: the preflight would try the first row too, then leave it to the run; the run alone here.
    config = eval_config(write_jsonl(rows), server, max_retries=1, request_timeout=timeout)
    result = run_eval(config, "--skip_preflight")
    # Normally both attempts time out waiting for the reply; on a starved machine a retry can
    # instead time out connecting (the same request_timeout), before it reaches the server.
    failed = {i: "request failed after 2 attempts: timed out" for i in range(20)}
    out_rows, stats = check_run(result, server, rows, max_retries=1, failed=failed, server_sees_every_attempt=False)
    assert stats["requests"] <= 40 and stats["by_status"] == {}  # no stalled reply ever came
    # two attempts cut at the timeout each, never a wait for the stalled reply
    assert all(r["http_status"] is None and 2000 * timeout <= r["latency_ms"] < 1000 * stall_s for r in out_rows)
    waited = [r["error"] for r in out_rows if "waiting for a reply" in r["error"]]
    assert waited and all("raise params.request_timeout" in error for error in waited)  # says what to do


# 4. Connection resets ----------------------------------------------------------------------------


def test_connection_resets_are_retried(start_server, write_jsonl, run_eval):
    # Seed 3 at 20 %: 7 resets in all, fewer than the 8 retries a row has, so every row succeeds.
    seed, rate, max_retries = 3, 0.2, 8
    resets = faults_before(seed, rate, N)
    assert resets == 7 < max_retries
    rows = dataset()
    server = start_server(reset_rate=rate, seed=seed, rules=reply_rules(rows))
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=max_retries))
    out_rows, stats = check_run(result, server, rows, max_retries=max_retries)
    assert stats["by_status"] == {"200": N, "reset": resets}
    assert sum(r["attempts"] - 1 for r in out_rows) == resets


def test_connection_resets_past_max_retries_are_recorded_with_a_cause(start_server, write_jsonl, run_eval):
    rows = dataset(30)
    server = start_server(reset_rate=1.0, rules=reply_rules(rows))
    # Every request fails: the preflight would stop the run (test_preflight_request.py); the run's own way here.
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=1), "--skip_preflight")
    failed = {i: "request failed after 2 attempts: connection to 127.0.0.1" for i in range(30)}
    out_rows, stats = check_run(result, server, rows, max_retries=1, failed=failed)
    assert stats["by_status"] == {"reset": 60}
    assert all("reset or closed" in r["error"] and r["http_status"] is None for r in out_rows)


# 5. Malformed JSON bodies ------------------------------------------------------------------------


def test_malformed_json_bodies_are_retried_as_transient(start_server, write_jsonl, run_eval):
    seed, rate, max_retries = 13, 0.2, 8
    malformed = faults_before(seed, rate, N)
    assert malformed == 8 <= max_retries
    rows = dataset()
    server = start_server(malformed_rate=rate, seed=seed, rules=reply_rules(rows))
    config = eval_config(write_jsonl(rows), server, max_retries=max_retries)
    result = run_eval(config)
    out_rows, stats = check_run(result, server, rows, max_retries=max_retries)
    assert stats["by_status"] == {"200": N + malformed}  # a malformed body still comes with a 200
    assert sum(r["attempts"] - 1 for r in out_rows) == malformed
    assert aimd(result)[0] == 0  # transient: no AIMD decrease


def test_malformed_json_bodies_past_max_retries_are_recorded(start_server, write_jsonl, run_eval):
    rows = dataset(30)
    server = start_server(malformed_rate=1.0, rules=reply_rules(rows))
    # Every request fails: the preflight would stop the run (test_preflight_request.py); the run's own way here.
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=2), "--skip_preflight")
    failed = {i: "request failed after 3 attempts: malformed reply" for i in range(30)}
    out_rows, _ = check_run(result, server, rows, max_retries=2, failed=failed)
    assert all("not valid JSON" in r["error"] and r["http_status"] == 200 for r in out_rows)


# 6. 200 with empty content -----------------------------------------------------------------------


def test_empty_answers_fail_the_row_without_retries(start_server, write_jsonl, run_eval):
    rows = dataset()
    empty = {4, 9, 31}
    rules = [{"match": f"<q{i:03d}>", "reply": ""} for i in empty]
    server = start_server(rules=rules + reply_rules(rows, skip=empty))
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=5))
    failed = {i: "the model returned an empty answer" for i in empty}
    out_rows, stats = check_run(result, server, rows, max_retries=5, failed=failed)
    for i in empty:
        assert stats["per_prompt"][prompt(rows[i])] == 1  # deterministic, so never retried
        assert out_rows[i]["http_status"] == 200 and out_rows[i]["attempts"] == 1
    assert stats["requests"] == N


def test_random_empty_answers_fail_exactly_the_drawn_rows(start_server, write_jsonl, run_eval):
    seed, rate = 7, 0.2
    rng = random.Random(seed)
    drawn = sum(rng.random() < rate for _ in range(N))  # one request per row: exactly N draws
    rows = dataset()
    server = start_server(empty_rate=rate, seed=seed, rules=reply_rules(rows))
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=5))
    assert result.code == 0, result.stderr
    failed = {r["row_index"]: "the model returned an empty answer" for r in result.rows if r["status"] == "error"}
    assert len(failed) == drawn > 0
    check_run(result, server, rows, max_retries=5, failed=failed)
    assert server.stats()["requests"] == N


# 7. Endpoint down, then up -----------------------------------------------------------------------


def test_endpoint_down_at_start_then_up_all_rows_succeed(start_server, write_jsonl, run_eval, monkeypatch):
    # The server process is launched when the workers set up (so Beam's start-up time, which
    # varies with load, cannot eat the outage) and binds 2 s later: until then every
    # connection is refused. Its port is chosen up front.
    rows = dataset()
    server = start_server(launch=False, down_for_s=2.0, rules=reply_rules(rows))
    launch = threading.Lock()
    setup = GenerateSamples.setup

    def setup_then_launch(self: GenerateSamples) -> None:
        setup(self)
        with launch:
            if server.pid is None:
                server.start()

    monkeypatch.setattr(GenerateSamples, "setup", setup_then_launch)
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=10), "--skip_preflight")
    assert server.pid is not None
    server.wait_listening()
    out_rows, stats = check_run(result, server, rows, max_retries=10, server_sees_every_attempt=False)
    assert set(stats["per_prompt"].values()) == {1}  # refused attempts never reached it
    assert stats["requests"] == N
    # At least the first `parallelism` rows went out at once, into the outage, and were retried
    # through it; rows sent after the bind (the DoFn queues 2 x parallelism) may pass at once.
    refused = [r for r in out_rows if r["attempts"] > 1]
    assert len(refused) >= 16
    assert all(r["latency_ms"] >= 1000 for r in refused)


def test_endpoint_that_never_comes_up_fails_every_row_with_connection_refused(start_server, write_jsonl, run_eval):
    rows = dataset(20)
    server = start_server(launch=False, down_for_s=600.0)  # a port with nothing listening
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=2), "--skip_preflight")
    failed = {i: "request failed after 3 attempts: connection refused by 127.0.0.1" for i in range(20)}
    out_rows, _ = check_run(result, None, rows, max_retries=2, failed=failed)
    assert all(r["http_status"] is None and r["attempts"] == 3 for r in out_rows)


def test_endpoint_down_without_skip_preflight_stops_before_the_run(start_server, write_jsonl, run_eval):
    server = start_server(launch=False, down_for_s=600.0)  # a port with nothing listening
    result = run_eval(eval_config(write_jsonl(dataset(5)), server))
    assert result.code == 2
    assert f"cannot reach the endpoint at 127.0.0.1:{server.port}" in result.stderr and "refused" in result.stderr
    assert "--skip_preflight" in result.stderr and "Traceback" not in result.stderr
    assert not result.output.exists()  # nothing was started, nothing written


# 8. 4xx: not retried -----------------------------------------------------------------------------


def test_client_errors_are_not_retried(start_server, write_jsonl, run_eval):
    rows = dataset()
    statuses = {3: 400, 17: 400, 21: 401, 29: 404, 36: 422}
    rules = [{"match": f"<q{i:03d}>", "status": status} for i, status in statuses.items()]
    server = start_server(rules=rules + reply_rules(rows, skip=set(statuses)))
    result = run_eval(eval_config(write_jsonl(rows), server, max_retries=5))
    failed = {i: f"HTTP {status}" for i, status in statuses.items()}
    out_rows, stats = check_run(result, server, rows, max_retries=5, failed=failed)
    for i, status in statuses.items():
        assert stats["per_prompt"][prompt(rows[i])] == 1
        assert out_rows[i]["http_status"] == status and out_rows[i]["attempts"] == 1
        assert "injected fault" in out_rows[i]["error"]  # the body's message is quoted
    assert "HTTP 400 Bad Request" in out_rows[3]["error"]
    assert {e["row_index"]: e["http_status"] for e in result.errors} == statuses
    assert stats["requests"] == N


# 9. Strict mode ----------------------------------------------------------------------------------


def test_strict_mode_exits_1_naming_the_row_and_cause(start_server, write_jsonl, run_eval):
    rows = dataset()
    rules = [{"match": "<q007>", "status": 500, "retry_after": 0}]
    server = start_server(rules=rules + reply_rules(rows, skip={7}))
    config = eval_config(write_jsonl(rows), server, max_retries=2, ignore_request_failure=False)
    result = run_eval(config)
    assert result.code == 1
    assert "on row 7" in result.stderr and "request failed after 3 attempts: HTTP 500" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (result.output / "results.json").exists()
    assert server.stats()["per_prompt"][prompt(rows[7])] == 3
    out_rows = result.rows
    assert [r["row_index"] for r in out_rows] == list(range(N))
    failed = [r["row_index"] for r in out_rows if r["status"] == "error"]
    assert 7 in failed and [e["row_index"] for e in result.errors] == failed
    assert all("not sent" in out_rows[i]["error"] for i in failed if i != 7)
