"""The stub server over real HTTP: reply shapes, scripted rules, fault injection and control endpoints."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from beameval.testserver.harness import ServerProcess


@pytest.fixture
def client(clean_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=clean_server.base_url, trust_env=False, timeout=5.0) as http:
        yield http


def chat(client: httpx.Client, text: str, **extra: object) -> httpx.Response:
    return client.post(
        "/chat/completions", json={"model": "m1", "messages": [{"role": "user", "content": text}], **extra}
    )


def wait_idle(server: ServerProcess, timeout: float = 3.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        stats = server.stats()
        if stats["in_flight"] == 0 or time.monotonic() > deadline:
            return stats
        time.sleep(0.02)


def test_chat_reply_shape_and_usage(client: httpx.Client) -> None:
    messages = [
        {"role": "system", "content": "system words here"},
        {"role": "user", "content": "hello big world"},
    ]
    response = client.post("/chat/completions", json={"model": "m1", "messages": messages})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert isinstance(body["created"], int)
    assert body["model"] == "m1"
    assert body["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "hello big world"}, "finish_reason": "stop"}
    ]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_completions_shape_with_and_without_prefix(clean_server: ServerProcess, client: httpx.Client) -> None:
    body = client.post("/completions", json={"prompt": "one two"}).json()
    assert body["object"] == "text_completion"
    assert body["model"] == "test-model"
    assert body["choices"][0]["text"] == "one two"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    bare = httpx.post(f"{clean_server.root_url}/completions", json={"prompt": "x"}, trust_env=False)
    assert bare.json()["choices"][0]["text"] == "x"
    messages = [{"role": "user", "content": "y"}]
    bare_chat = httpx.post(f"{clean_server.root_url}/chat/completions", json={"messages": messages}, trust_env=False)
    assert bare_chat.json()["choices"][0]["message"]["content"] == "y"


def test_models_and_unknown_routes(client: httpx.Client) -> None:
    assert client.get("/models").json()["data"][0]["id"] == "test-model"
    assert client.get("/nope").status_code == 404
    assert client.get("/chat/completions").status_code == 405
    bad = client.post("/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == 400


def test_rule_fail_times_then_reply(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(rules=[{"match": "flaky", "status": 500, "fail_times": 2, "reply": "finally"}])
    statuses = [chat(client, "a flaky prompt").status_code for _ in range(2)]
    last = chat(client, "a flaky prompt")
    assert statuses == [500, 500]
    assert last.status_code == 200
    assert last.json()["choices"][0]["message"]["content"] == "finally"
    assert chat(client, "another flaky prompt").status_code == 500  # counted per prompt
    assert chat(client, "steady prompt").json()["choices"][0]["message"]["content"] == "steady prompt"
    stats = clean_server.stats()
    assert stats["by_status"] == {"500": 3, "200": 2}
    assert stats["per_prompt"]["a flaky prompt"] == 3


def test_rule_status_and_retry_after(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(rules=[{"match": "limit me", "status": 429, "retry_after": 0.25}])
    response = chat(client, "please limit me")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "0.25"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_error_rate_with_retry_after(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(error_rate=1.0, error_status=503, retry_after=2)
    response = chat(client, "anything")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert response.json()["error"]["code"] == 503
    clean_server.configure(error_status=500, retry_after=None)
    plain = chat(client, "anything")
    assert plain.status_code == 500
    assert "retry-after" not in plain.headers
    assert clean_server.stats()["by_status"] == {"503": 1, "500": 1}


async def _burst(base_url: str, count: int, text: str = "burst") -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, trust_env=False, timeout=5.0) as http:
        body = {"messages": [{"role": "user", "content": text}]}
        return list(await asyncio.gather(*(http.post("/chat/completions", json=body) for _ in range(count))))


def test_capacity_rejects_excess_with_429(clean_server: ServerProcess) -> None:
    capacity = 3
    clean_server.configure(capacity=capacity, latency_ms=200, retry_after=1)
    responses = asyncio.run(_burst(clean_server.base_url, 2 * capacity))
    statuses = Counter(r.status_code for r in responses)
    assert statuses[429] >= 1
    assert statuses[200] >= capacity
    assert statuses[200] + statuses[429] == 2 * capacity
    assert all(r.headers["retry-after"] == "1" for r in responses if r.status_code == 429)
    stats = clean_server.stats()
    assert stats["peak_in_flight"] == capacity
    assert stats["in_flight"] == 0
    assert stats["requests"] == 2 * capacity
    assert stats["by_status"]["429"] == statuses[429]


def test_peak_in_flight_is_exact(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(latency_ms=200)
    responses = asyncio.run(_burst(clean_server.base_url, 5))
    assert [r.status_code for r in responses] == [200] * 5
    burst = clean_server.stats()
    assert burst["peak_in_flight"] == 5
    assert 5 * 0.2 <= burst["in_flight_s"] < 5 * 0.3  # five requests, each 200 ms inside the server
    clean_server.reset()
    clean_server.configure(latency_ms=0)
    for _ in range(3):
        chat(client, "one at a time")
    stats = clean_server.stats()
    assert (stats["peak_in_flight"], stats["in_flight"], stats["requests"]) == (1, 0, 3)


def test_latency_and_jitter_delay_answers(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(latency_ms=100, jitter_ms=50)
    started = time.perf_counter()
    assert chat(client, "slow").status_code == 200
    elapsed = time.perf_counter() - started
    assert elapsed >= 0.1


def test_stall_triggers_client_timeout(clean_server: ServerProcess) -> None:
    clean_server.configure(stall_rate=1.0, stall_s=0.5)
    with httpx.Client(base_url=clean_server.base_url, trust_env=False, timeout=0.15) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            chat(impatient, "stalled")
    assert clean_server.stats()["in_flight"] == 1
    stats = wait_idle(clean_server)
    assert stats["in_flight"] == 0
    assert stats["per_prompt"] == {"stalled": 1}


def test_reset_drops_connection(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(reset_rate=1.0)
    with pytest.raises(httpx.TransportError):
        chat(client, "doomed")
    clean_server.configure(reset_rate=0.0)
    assert chat(client, "fine").status_code == 200
    assert clean_server.stats()["by_status"] == {"reset": 1, "200": 1}


def test_malformed_body(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(malformed_rate=1.0)
    response = chat(client, "x")
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_empty_content(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(empty_rate=1.0)
    body = chat(client, "say something").json()
    assert body["choices"][0]["message"]["content"] == ""
    assert body["usage"]["completion_tokens"] == 0
    assert client.post("/completions", json={"prompt": "p"}).json()["choices"][0]["text"] == ""


def test_per_prompt_counts(clean_server: ServerProcess, client: httpx.Client) -> None:
    chat(client, "a")
    chat(client, "a")
    chat(client, "b")
    client.post("/completions", json={"prompt": "c"})
    stats = clean_server.stats()
    assert stats["per_prompt"] == {"a": 2, "b": 1, "c": 1}
    assert stats["requests"] == 4
    assert stats["by_status"] == {"200": 4}


def test_keep_alive_reuses_one_connection(clean_server: ServerProcess, client: httpx.Client) -> None:
    for _ in range(5):
        chat(client, "same socket")
    assert clean_server.stats()["connections"] == 1


def test_config_partial_update_and_reset(clean_server: ServerProcess, client: httpx.Client) -> None:
    assert clean_server.configure(latency_ms=5)["latency_ms"] == 5
    config = clean_server.configure(error_rate=0.0, retry_after=3)
    assert (config["latency_ms"], config["retry_after"], config["error_status"]) == (5, 3, 503)
    assert client.get(f"{clean_server.root_url}/_config").json() == config
    assert client.post(f"{clean_server.root_url}/_config", json={"error_rate": 2}).status_code == 400
    assert client.post(f"{clean_server.root_url}/_config", json={"bogus": 1}).status_code == 400
    assert client.post(f"{clean_server.root_url}/_config", content=b"[1]").status_code == 400
    chat(client, "counted")
    clean_server.reset()
    stats = clean_server.stats()
    assert (stats["requests"], stats["by_status"], stats["per_prompt"]) == (0, {}, {})
    assert clean_server.last_request() is None
    assert client.get(f"{clean_server.root_url}/_config").json()["latency_ms"] == 5  # plain reset keeps config
    clean_server.reset(config=True)
    assert client.get(f"{clean_server.root_url}/_config").json()["latency_ms"] == 0


def test_last_request_records_body_and_headers(clean_server: ServerProcess, client: httpx.Client) -> None:
    chat(client, "inspect me", temperature=0.0, max_tokens=7)
    client.get("/models")  # not an inference call: does not replace the record
    last = clean_server.last_request()
    assert last is not None
    assert last["path"] == "/v1/chat/completions"
    assert last["method"] == "POST"
    assert last["body"]["temperature"] == 0.0
    assert last["body"]["max_tokens"] == 7
    assert last["body"]["messages"][0]["content"] == "inspect me"
    client.post("/chat/completions", json={"messages": []}, headers={"Authorization": "Bearer sk-test"})
    assert clean_server.last_request()["headers"]["authorization"] == "Bearer sk-test"


def test_tool_calls_rule(clean_server: ServerProcess, client: httpx.Client) -> None:
    calls = [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    clean_server.configure(rules=[{"match": "weather", "tool_calls": calls}])
    choice = chat(client, "weather in Paris?").json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def test_structured_output_requests_get_scripted_text(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(rules=[{"match": "2+2", "reply": '{"answer": 4}'}])
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    response = chat(
        client,
        "what is 2+2",
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
        nvext={"guided_json": schema},
    )
    assert json.loads(response.json()["choices"][0]["message"]["content"]) == {"answer": 4}


def test_agent_endpoint(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(rules=[{"match": "capital", "reply": "Paris", "fail_times": 1}])
    url = f"{clean_server.root_url}/agent"
    assert client.post(url, json={"input": "the capital of France"}).status_code == 503
    body = client.post(url, json={"input": "the capital of France", "session": 1}).json()
    assert body["output"] == "Paris"
    assert body["trajectory"] == [{"step": 1, "tool": "search", "input": "the capital of France"}]
    assert client.post(url, json={"input": "echo this"}).json()["output"] == "echo this"
    assert clean_server.stats()["per_prompt"] == {"the capital of France": 2, "echo this": 1}


def test_seeded_faults_replay_after_reset(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(error_rate=0.5, seed=1234)
    first = [chat(client, "dice").status_code for _ in range(16)]
    clean_server.reset()
    second = [chat(client, "dice").status_code for _ in range(16)]
    assert first == second
    assert set(first) == {200, 503}


def _raw_exchange(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_raw_http_pipelining_close_and_chunked(clean_server: ServerProcess) -> None:
    body = json.dumps({"prompt": "raw"}).encode()
    request = b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    closing = b"GET /v1/models HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    wire = _raw_exchange(clean_server.port, request + request + closing)  # clean_server closes after the third
    assert wire.count(b"HTTP/1.1 200 OK") == 3
    assert wire.count(b'"text":"raw"') == 2
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in (body[:5], body[5:])) + b"0\r\n\r\n"
    chunked = _raw_exchange(
        clean_server.port,
        b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunks,
    )
    assert chunked.startswith(b"HTTP/1.1 200 OK") and b'"text":"raw"' in chunked
    too_long = b"GET /v1/models HTTP/1.1\r\nHost: h\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n"
    for bad in (b"NOT HTTP AT ALL\r\n\r\n", b"GET /v1/models HTTP/1.1\r\n\r\n", too_long):  # no Host; 8190 max
        assert b" 400 Bad Request\r\n" in _raw_exchange(clean_server.port, bad).split(b"\r\n", 1)[0] + b"\r\n"
    assert "Traceback" not in clean_server.stderr()  # nothing per request, bad ones included


def test_files_api_reads_any_clients_multipart(clean_server: ServerProcess, client: httpx.Client) -> None:
    content = b'{"custom_id": "a"}\n'
    name = "in spaces + plus.jsonl"
    made = client.post("/files", data={"purpose": "batch"}, files={"file": (name, content, "application/jsonl")})
    assert made.status_code == 200, made.text
    file = made.json()
    assert (file["filename"], file["bytes"], file["purpose"]) == (name, len(content), "batch")
    assert client.get(f"/files/{file['id']}/content").content == content
    wrong = client.post("/files", data={"purpose": "fine-tune"}, files={"file": ("x.jsonl", content)})
    assert wrong.status_code == 400 and "purpose must be 'batch'" in wrong.json()["error"]["message"]
    assert client.post("/files", json={"purpose": "batch"}).status_code == 400
    no_file = client.post("/files", files={"purpose": (None, "batch")})
    assert no_file.status_code == 400
    assert client.get("/files/file-missing").status_code == 404
    assert client.delete(f"/files/{file['id']}").json()["deleted"] is True
    assert client.get(f"/files/{file['id']}/content").status_code == 404
    assert clean_server.stats()["not_found"] == {}  # the Files API's 404s are its own, not unknown routes


def test_api_key_guards_the_apis_but_not_the_control_routes(clean_server: ServerProcess, client: httpx.Client) -> None:
    clean_server.configure(api_key="sk-test")
    for method, path in (
        ("POST", "/chat/completions"),
        ("POST", "/models"),
        ("GET", "/files"),
        ("POST", "/embeddings"),
    ):
        assert client.request(method, path, json={}).status_code == 401, (method, path)
    assert client.get("/models", headers={"Authorization": "Bearer sk-test"}).status_code == 200
    assert client.get("/files", headers={"Authorization": "Bearer sk-test"}).json()["data"] == []
    assert httpx.get(f"{clean_server.root_url}/_batches", trust_env=False).status_code == 200
    assert clean_server.stats()["requests"] == 0
