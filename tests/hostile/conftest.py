"""A small misbehaving OpenAI-compatible server of our own, on 127.0.0.1, for hostile-input tests.

The project's test server always builds well-formed replies; these tests need replies no
honest server sends (a lone surrogate escape, ``prompt_tokens: 2**64``, a gateway echoing
the request headers, a ``Retry-After`` of a day). Each test scripts replies by a substring
of the prompt; every other prompt is answered with itself, as the test server does.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

#: (status, headers, body) for a request; the callable gets the request's headers and prompt.
Scripted = Callable[[dict[str, str], str], tuple[int, dict[str, str], bytes]]


def chat_body(content_json: str, usage_json: str = '{"prompt_tokens": 3, "completion_tokens": 2}') -> bytes:
    """A chat.completion body with the content and usage given as raw JSON text (so any escape can be sent)."""
    return (
        '{"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "message": '
        f'{{"role": "assistant", "content": {content_json}}}, "finish_reason": "stop"}}], "usage": {usage_json}}}'
    ).encode()


def reply_with(content_json: str, usage_json: str | None = None, status: int = 200, **headers: str) -> Scripted:
    body = chat_body(content_json, usage_json) if usage_json else chat_body(content_json)
    return lambda _headers, _prompt: (status, dict(headers), body)


@dataclass
class HostileServer:
    """Serves ``/v1/chat/completions`` and ``/v1/models``; ``script`` maps prompt substrings to replies."""

    script: dict[str, Scripted] = field(default_factory=dict)
    seen: Counter[str] = field(default_factory=Counter)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    reply_with = staticmethod(reply_with)
    chat_body = staticmethod(chat_body)

    def answer(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        request = json.loads(body)
        prompt = request["messages"][-1]["content"]
        self.seen[prompt] += 1
        for match, scripted in self.script.items():
            if match in prompt:
                return scripted(headers, prompt)
        return 200, {}, chat_body(json.dumps(prompt))


def _handler(server: HostileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            self._send(200, {}, b'{"object": "list", "data": [{"id": "m"}]}')

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self._send(*server.answer(dict(self.headers.items()), body))

    return Handler


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    state = HostileServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def hostile_target(hostile: HostileServer) -> Callable[..., dict[str, Any]]:
    def target(**model: Any) -> dict[str, Any]:
        return {"model": {"url": hostile.base_url, "name": "m", "format": "openai", **model}}

    return target
