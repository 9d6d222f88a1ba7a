"""InferenceEngine against the real test server (testserver.harness.ServerProcess)."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from beameval.config import AgentTarget, ModelTarget, Params, TargetConfig
from beameval.inference.engine import InferenceEngine, Outcome
from beameval.inference.prepared import PreparedRequest, request_hash
from beameval.inference.targets import make_handler
from beameval.testserver.harness import free_port

KEY = "sk-engine-test-KEY123456"


class ZeroRng:
    """No jitter: retries after transient failures do not sleep (Retry-After still applies)."""

    def random(self) -> float:
        return 0.0


def model_handler(base_url: str, key: str | None = KEY, **params):
    target = TargetConfig(model=ModelTarget(url=base_url, name="m", format="openai"))
    return make_handler(target, Params(**params), key)


def engine_for(handler, parallelism=8, max_retries=3, timeout=10.0):
    return InferenceEngine(handler, parallelism, max_retries, timeout, rng=ZeroRng())


def call_once(handler, request: dict, **engine_settings) -> Outcome:
    """Send one request through a fresh engine, closed afterwards."""
    engine = engine_for(handler, **engine_settings)
    try:
        return engine.submit(handler.prepare(request), handler).result(timeout=30)
    finally:
        engine.close()


def chat(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def run_all(engine, handler, prompts):
    futures = [engine.submit(handler.prepare(chat(p)), handler) for p in prompts]
    return [f.result(timeout=60) for f in futures]


def test_success_sample_usage_headers_and_hash(clean_server):
    handler = model_handler(clean_server.base_url)
    engine = engine_for(handler)
    try:
        prepared = handler.prepare(chat("hello there"))
        outcome = engine.submit(prepared, handler).result(timeout=30)
    finally:
        engine.close()
    assert outcome.ok, outcome.error
    assert outcome.sample["output_text"] == "hello there"
    assert (outcome.status, outcome.attempts) == (200, 1)
    assert outcome.prompt_tokens == 2 and outcome.completion_tokens == 2
    assert outcome.sample["usage"] == {"prompt_tokens": 2, "completion_tokens": 2}
    assert outcome.request_hash == request_hash(prepared)
    assert outcome.latency_s > 0
    last = clean_server.last_request()
    assert last["path"] == "/v1/chat/completions"
    assert last["headers"]["authorization"] == f"Bearer {KEY}"
    assert last["body"] == prepared.body


def test_concurrency_never_exceeds_parallelism(clean_server):
    clean_server.configure(latency_ms=50)
    handler = model_handler(clean_server.base_url)
    engine = engine_for(handler, parallelism=8)
    try:
        outcomes = run_all(engine, handler, [f"q{i}" for i in range(200)])
        counters = engine.snapshot_counters()
    finally:
        engine.close()
    assert all(o.ok for o in outcomes)
    assert clean_server.stats()["peak_in_flight"] == 8
    assert counters.peak_in_flight == 8 and counters.limit == 8
    assert (counters.calls, counters.successes, counters.attempts, counters.retries) == (200, 200, 200, 0)
    assert counters.prompt_tokens == 200 and counters.completion_tokens == 200
    assert len(counters.latencies_s) == 200
    assert engine.snapshot_counters().calls == 0  # deltas: reset by the previous call


def test_submit_from_many_threads(clean_server):
    handler = model_handler(clean_server.base_url)
    engine = engine_for(handler, parallelism=4)
    results: list = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        futures = [engine.submit(handler.prepare(chat(f"t{n}-{i}")), handler) for i in range(25)]
        done = [f.result(timeout=30) for f in futures]
        with lock:
            results.extend(done)

    try:
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        engine.close()
    assert len(results) == 200 and all(o.ok for o in results)
    assert clean_server.stats()["peak_in_flight"] <= 4


def test_retry_after_is_honoured(clean_server):
    clean_server.configure(rules=[{"match": "slow down", "status": 429, "fail_times": 1, "retry_after": 1}])
    handler = model_handler(clean_server.base_url)
    outcome = call_once(handler, chat("please slow down"))
    assert outcome.ok and outcome.attempts == 2
    assert outcome.latency_s >= 1.0
    assert outcome.failure_classes == ("hard_overload",)
    assert clean_server.stats()["per_prompt"]["please slow down"] == 2


def test_a_request_waiting_to_retry_leaves_its_slot_to_queued_ones(clean_server):
    """One slot: while "wait" sits out its Retry-After, the five queued behind it are sent and answered."""
    clean_server.configure(rules=[{"match": "wait", "status": 429, "fail_times": 1, "retry_after": 1}])
    handler = model_handler(clean_server.base_url)
    engine = engine_for(handler, parallelism=1)
    finished: list[str] = []
    try:
        futures = {}
        for prompt in ["wait", "q0", "q1", "q2", "q3", "q4"]:
            futures[prompt] = engine.submit(handler.prepare(chat(prompt)), handler)
            futures[prompt].add_done_callback(lambda _, prompt=prompt: finished.append(prompt))
        outcomes = {prompt: future.result(timeout=30) for prompt, future in futures.items()}
    finally:
        engine.close()
    assert all(outcome.ok for outcome in outcomes.values())
    assert outcomes["wait"].attempts == 2 and outcomes["wait"].latency_s >= 1.0
    assert finished == ["q0", "q1", "q2", "q3", "q4", "wait"]
    assert max(outcomes[f"q{i}"].latency_s for i in range(5)) < 0.5
    assert clean_server.stats()["peak_in_flight"] == 1


def test_400_is_not_retried(clean_server):
    clean_server.configure(rules=[{"match": "bad", "status": 400}])
    handler = model_handler(clean_server.base_url)
    outcome = call_once(handler, chat("bad request"))
    assert clean_server.stats()["per_prompt"]["bad request"] == 1
    assert outcome.error.status == 400 and outcome.error.attempts == 1
    assert outcome.error.message.startswith(f"HTTP 400 Bad Request from {clean_server.base_url}/chat/completions: ")
    assert "injected fault" in outcome.error.message
    assert KEY not in str(outcome.error)


def test_max_tokens_refused_is_resent_as_max_completion_tokens_once_and_then_up_front(clean_server):
    """A reasoning model's 400 names the fix; the request is resent without spending a retry."""
    clean_server.configure(unsupported_params=["max_tokens"])
    handler = model_handler(clean_server.base_url)
    engine = engine_for(handler, max_retries=0)
    try:
        first = engine.call(handler.prepare({**chat("first"), "max_tokens": 64}), handler)
        first_body = clean_server.last_request()["body"]
        second = engine.call(handler.prepare({**chat("second"), "max_tokens": 32}), handler)
        second_body = clean_server.last_request()["body"]
    finally:
        engine.close()
    assert first.error is None and first.sample["output_text"] == "first"
    assert (first.attempts, first.failure_classes) == (2, ("fatal",))  # max_retries=0: the resend is free
    assert first_body["max_completion_tokens"] == 64 and "max_tokens" not in first_body
    sent = PreparedRequest(f"{clean_server.base_url}/chat/completions", first_body, {})
    assert first.request_hash == request_hash(sent)
    assert second.error is None and second.attempts == 1  # the handler now sends the new name itself
    assert second_body["max_completion_tokens"] == 32 and "max_tokens" not in second_body
    assert clean_server.stats()["by_status"] == {"400": 1, "200": 2}


def test_other_400s_are_not_revised(clean_server):
    clean_server.configure(unsupported_params=["temperature"])
    handler = model_handler(clean_server.base_url)
    engine = engine_for(handler)
    try:
        outcome = engine.call(handler.prepare({**chat("hot"), "temperature": 2, "max_tokens": 8}), handler)
    finally:
        engine.close()
    assert outcome.error.status == 400 and outcome.error.attempts == 1
    assert "Unsupported parameter: 'temperature'" in outcome.error.message
    assert handler.completion_tokens_param is False


def test_max_retries_bounds_attempts(clean_server):
    clean_server.configure(error_rate=1.0, error_status=500)
    handler = model_handler(clean_server.base_url)
    engine = engine_for(handler, max_retries=2)
    try:
        outcome = engine.submit(handler.prepare(chat("always fails")), handler).result(timeout=30)
        override = engine.submit(handler.prepare(chat("no retries")), handler, max_retries=0).result(timeout=30)
    finally:
        engine.close()
    stats = clean_server.stats()
    assert stats["per_prompt"]["always fails"] == 3 and outcome.attempts == 3
    assert outcome.error.message == (
        f"request failed after 3 attempts: HTTP 500 Internal Server Error from {clean_server.base_url}/chat/completions"
    )
    assert stats["per_prompt"]["no retries"] == 1 and override.attempts == 1


def test_stall_hits_the_timeout_and_is_retried(clean_server):
    clean_server.configure(stall_rate=1.0, stall_s=1.5)
    handler = model_handler(clean_server.base_url)
    outcome = call_once(handler, chat("stalled"), max_retries=1, timeout=0.3)
    assert clean_server.stats()["per_prompt"]["stalled"] == 2
    assert outcome.error.failure_class == "soft_overload"
    assert outcome.error.message.startswith("request failed after 2 attempts: timed out waiting for a reply from")
    assert 0.6 <= outcome.latency_s < 1.5


def test_connection_reset_is_retried(clean_server):
    clean_server.configure(reset_rate=0.3, seed=3)
    handler = model_handler(clean_server.base_url)
    engine = engine_for(handler, max_retries=8)
    try:
        outcomes = run_all(engine, handler, [f"r{i}" for i in range(60)])
        counters = engine.snapshot_counters()
    finally:
        engine.close()
    assert all(o.ok for o in outcomes)
    assert counters.retries > 0 and counters.attempt_failures.get("transient", 0) == counters.retries
    assert clean_server.stats()["by_status"].get("reset", 0) == counters.retries


def test_connection_reset_every_time_fails_clearly(clean_server):
    clean_server.configure(reset_rate=1.0)
    handler = model_handler(clean_server.base_url)
    outcome = call_once(handler, chat("reset me"), max_retries=1)
    assert clean_server.stats()["per_prompt"]["reset me"] == 2
    assert outcome.error.failure_class == "transient"
    assert "reset or closed before a complete reply" in outcome.error.message


def test_malformed_json_is_retried_then_fails_clearly(clean_server):
    clean_server.configure(malformed_rate=1.0)
    handler = model_handler(clean_server.base_url)
    outcome = call_once(handler, chat("garbled"), max_retries=2)
    assert clean_server.stats()["per_prompt"]["garbled"] == 3
    assert outcome.error.message.startswith("request failed after 3 attempts: malformed reply from ")
    assert "not valid JSON" in outcome.error.message and outcome.error.status == 200


def test_empty_answer_is_not_retried(clean_server):
    clean_server.configure(empty_rate=1.0)
    handler = model_handler(clean_server.base_url)
    outcome = call_once(handler, chat("say nothing"))
    assert clean_server.stats()["per_prompt"]["say nothing"] == 1
    assert outcome.error.message.startswith("the model returned an empty answer")


def test_connection_refused_names_the_host():
    port = free_port()
    handler = model_handler(f"http://127.0.0.1:{port}/v1")
    outcome = call_once(handler, chat("anyone?"), max_retries=1)
    assert outcome.attempts == 2
    assert outcome.error.message == (
        f"request failed after 2 attempts: connection refused by 127.0.0.1:{port} (is the server running?)"
    )


def test_completions_route_and_agent_handler(clean_server):
    handler = model_handler(clean_server.base_url + "/completions?tenant=a", key=None)
    outcome = call_once(handler, "complete me")
    assert outcome.ok and outcome.sample["output_text"] == "complete me"
    last = clean_server.last_request()
    assert last["path"] == "/v1/completions" and "authorization" not in last["headers"]

    agent = AgentTarget(
        url=clean_server.root_url + "/agent",
        body={"input": "{{ item.question }}"},
        response_path="$.output",
        trajectory_path="$.trajectory",
    )
    agent_handler = make_handler(TargetConfig(agent=agent), Params(), None)
    engine = engine_for(agent_handler)
    try:
        prepared = agent_handler.prepare(None, item={"question": "where?"})
        outcome = engine.submit(prepared, agent_handler).result(timeout=30)
    finally:
        engine.close()
    assert outcome.ok and outcome.sample["output_text"] == "where?"
    assert outcome.sample["trajectory"] == [{"step": 1, "tool": "search", "input": "where?"}]


def test_shared_registry_and_close(clean_server):
    handler = model_handler(clean_server.base_url)
    first = InferenceEngine.shared(handler, 4, 3, 10.0)
    assert InferenceEngine.shared(model_handler(clean_server.base_url), 4, 3, 10.0) is first
    other = InferenceEngine.shared(model_handler(clean_server.base_url, key="another-key"), 4, 3, 10.0)
    assert other is not first
    clean_server.configure(latency_ms=300)
    pending = [first.submit(handler.prepare(chat(f"c{i}")), handler) for i in range(20)]
    first.close()
    other.close()
    results = [f.result(timeout=30) for f in pending]
    assert all(r.ok or "engine was closed" in r.error.message for r in results)
    assert any(not r.ok for r in results)
    late = first.submit(handler.prepare(chat("late")), handler).result(timeout=5)
    assert "engine was closed" in late.error.message
    assert InferenceEngine.shared(handler, 4, 3, 10.0) is not first
    InferenceEngine.shared(handler, 4, 3, 10.0).close()


@pytest.mark.slow
def test_capacity_limited_server_keeps_success_and_throughput(clean_server):
    clean_server.configure(latency_ms=50, capacity=16, retry_after=1)
    handler = model_handler(clean_server.base_url)
    engine = InferenceEngine(handler, 64, 5, 30.0)
    try:
        start = time.perf_counter()
        futures = [engine.submit(handler.prepare(chat(f"cap{i}")), handler) for i in range(2000)]
        outcomes = [f.result(timeout=120) for f in concurrent.futures.as_completed(futures)]
        elapsed = time.perf_counter() - start
        counters = engine.snapshot_counters()
    finally:
        engine.close()
    ok = sum(o.ok for o in outcomes)
    assert ok / len(outcomes) >= 0.995
    rate = ok / elapsed
    rejected = clean_server.stats()["by_status"].get("429", 0)
    print(f"capacity 16: {rate:.0f} rows/s, limit now {counters.limit}, 429s {rejected}")
    assert clean_server.stats()["peak_in_flight"] <= 16
    assert rate >= 0.6 * 16 / 0.05 * 0.5  # half the design target, to tolerate a loaded CI machine
