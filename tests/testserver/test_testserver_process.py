"""The stub server as a process: CLI flags, answers mode, delayed start, startup errors and shutdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from beameval.testserver.harness import PROJECT_ROOT, ServerProcess


def _chat(base_url: str, text: str, timeout: float = 5.0) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{base_url}/chat/completions", json=body, trust_env=False, timeout=timeout)


def test_answers_mode(tmp_path: Path) -> None:
    answers = tmp_path / "answers.jsonl"
    rows = [
        {"question": "capital of France", "model_answer": "Paris"},
        {"question": "2+2", "model_answer": "4"},
    ]
    answers.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with ServerProcess(answers=answers, rules=[{"match": "override", "reply": "ruled"}]) as server:
        assert (
            _chat(server.base_url, "Q: What is the capital of France?").json()["choices"][0]["message"]["content"]
            == "Paris"
        )
        completion = httpx.post(f"{server.base_url}/completions", json={"prompt": "2+2="}, trust_env=False).json()
        assert completion["choices"][0]["text"] == "4"
        assert completion["usage"] == {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        assert _chat(server.base_url, "unknown question").json()["choices"][0]["message"]["content"] == "I don't know."
        assert _chat(server.base_url, "override 2+2").json()["choices"][0]["message"]["content"] == "ruled"


def test_cli_flags_override_config_file() -> None:
    flags = ["--latency-ms", "5", "--jitter-ms", "1", "--capacity", "2", "--retry-after", "1.5"]
    flags += ["--error-rate", "0.25", "--error-status", "502", "--seed", "9"]
    with ServerProcess(latency_ms=100, seed=1, extra_args=flags) as server:
        config = httpx.get(f"{server.root_url}/_config", trust_env=False).json()
    expected = {"latency_ms": 5, "jitter_ms": 1, "capacity": 2, "retry_after": 1.5}
    expected |= {"error_rate": 0.25, "error_status": 502, "seed": 9}
    assert {key: config[key] for key in expected} == expected


def test_down_for_refuses_then_serves() -> None:
    started = time.monotonic()
    with ServerProcess(down_for_s=1.0) as server:
        with pytest.raises(httpx.ConnectError):
            _chat(server.base_url, "too early")
        server.wait_listening()
        assert time.monotonic() - started >= 1.0
        response = _chat(server.base_url, "now")
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == "now"


def test_startup_failure_reports_stderr(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    server = ServerProcess(answers=missing)
    with pytest.raises(RuntimeError, match="did not print LISTENING") as info:
        server.start()
    assert "missing.jsonl" in str(info.value)
    assert server.returncode == 2


def test_down_for_needs_port_and_one_stdout_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    cmd = [sys.executable, "-m", "beameval.testserver"]
    refused = subprocess.run([*cmd, "--down-for", "1"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    assert refused.returncode == 2
    assert "--down-for needs an explicit --port" in refused.stderr
    proc = subprocess.Popen([*cmd, "--port", "0"], cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("LISTENING ") and int(line.split()[1]) > 0
        for _ in range(3):
            assert _chat(f"http://127.0.0.1:{line.split()[1]}/v1", "quiet").status_code == 200
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=5)
    assert out == ""
    assert proc.returncode == 0


def test_sigterm_during_stalled_request_exits_cleanly() -> None:
    server = ServerProcess(stall_rate=1.0, stall_s=30).start()
    errors: list[BaseException] = []

    def stalled() -> None:
        try:
            _chat(server.base_url, "hang", timeout=10)
        except httpx.HTTPError as exc:
            errors.append(exc)

    worker = threading.Thread(target=stalled)
    worker.start()
    deadline = time.monotonic() + 3
    while server.stats()["in_flight"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    server.stop()
    worker.join(5)
    assert time.monotonic() - started < 3
    assert server.returncode == 0
    assert len(errors) == 1 and isinstance(errors[0], httpx.TransportError)
