"""The asyncio OpenAI-compatible stub server and its routes, so clients can be tested against real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

from beameval.testserver.batches import BatchService
from beameval.testserver.faults import FaultConfig, FaultInjector, Outcome
from beameval.testserver.http11 import BadRequest, Request, Response, json_response, read_request
from beameval.testserver.quota import ProviderQuota
from beameval.testserver.replies import (
    DEFAULT_MODEL,
    Replier,
    agent_response,
    chat_response,
    completion_response,
    error_body,
    prompt_text,
)
from beameval.testserver.retrieval import ROUTES as RETRIEVAL_ROUTES
from beameval.testserver.retrieval import retrieval_reply
from beameval.testserver.stats import Stats

__all__ = ["StubServer", "format_retry_after"]

_INFERENCE = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "completion",
    "/completions": "completion",
    "/agent": "agent",
    "/v1/agent": "agent",
}


def _models(served: list[str] | None) -> dict[str, Any]:
    """The models listing: the served models (``models``), else ``test-model``."""
    names = [DEFAULT_MODEL] if served is None else served
    return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "testserver"} for name in names]}


_MALFORMED = b'{"choices": [{"message": this is not JSON'
_WRITE_HIGH_WATER = 1 << 16


def format_retry_after(seconds: float) -> str:
    """Render seconds for ``Retry-After``: ``"2"`` for whole numbers, else ``"0.5"``."""
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def _retry_headers(seconds: float | None) -> dict[str, str] | None:
    return None if seconds is None else {"Retry-After": format_retry_after(seconds)}


class StubServer:
    """An OpenAI-compatible server with fault injection, for tests and benchmarks.

    Args:
        config: initial faults; ``POST /_reset`` with ``{"config": true}`` restores it.
        host: interface to bind; loopback unless told otherwise.
        port: port to bind; 0 picks a free one (not allowed with ``down_for_s``).
        replier: reply policy; echo by default.
        down_for_s: bind only this many seconds after :meth:`start`, so clients
            get "connection refused" meanwhile.
    """

    def __init__(
        self,
        config: FaultConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        replier: Replier | None = None,
        down_for_s: float = 0.0,
    ) -> None:
        if down_for_s > 0 and port == 0:
            raise ValueError("down_for_s needs an explicit port")
        self.initial_config = config or FaultConfig()
        self.faults = FaultInjector(self.initial_config)
        self.replier = replier or Replier()
        self.stats = Stats()
        self.batches = BatchService(self._answer_line)  # the Files and Batches API (batch mode)
        self.quota = ProviderQuota()
        self.host = host
        self.port = port
        self.down_for_s = down_for_s
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._seq = 0

    async def start(self) -> int:
        """Wait ``down_for_s``, bind and start accepting; return the bound port."""
        if self.down_for_s > 0:
            await asyncio.sleep(self.down_for_s)
        self._server = await asyncio.start_server(self._serve_connection, self.host, self.port, backlog=2048)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop accepting, drop open connections and wait until all are closed."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        transport = writer.transport
        self.stats.connected()
        try:
            while True:
                try:
                    request = await read_request(reader)
                except BadRequest as exc:
                    writer.write(json_response(exc.status, error_body(exc.status, exc.message)).encode(False))
                    break
                if request is None:
                    break
                response = await self._dispatch(request)
                if response is None:
                    abort_with_reset(writer)
                    return
                if transport.is_closing():
                    break
                writer.write(response.encode(request.keep_alive))
                if transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                    await writer.drain()
                if not request.keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()

    async def _dispatch(self, request: Request) -> Response | None:
        if request.path in RETRIEVAL_ROUTES:  # embeddings, ranking, rerank (beameval.testserver.retrieval)
            return await retrieval_reply(self, request)
        kind = _INFERENCE.get(request.path)
        api_key = self.faults.config.api_key
        batch_api = self.batches.owns(request.path)
        guarded = kind is not None or request.path in ("/v1/models", "/models")
        guarded = guarded or (batch_api and request.path != "/_batches")
        if api_key and guarded and request.headers.get("authorization") != f"Bearer {api_key}":
            return json_response(401, error_body(401, "invalid API key"))
        if batch_api:
            return self.batches.handle(request)
        if kind is not None:
            if request.method != "POST":
                return json_response(405, error_body(405, "use POST"))
            return await self._inference(kind, request)
        route = (request.method, request.path)
        if route in (("GET", "/v1/models"), ("GET", "/models")):
            return json_response(200, _models(self.faults.config.models))
        if route == ("GET", "/_stats"):
            return json_response(200, {**self.stats.snapshot(), "quota": self.quota.snapshot()})
        if route == ("GET", "/_last_request"):
            return json_response(200, self.stats.last_request)
        if route == ("GET", "/_config"):
            return json_response(200, self.faults.config.model_dump())
        if route == ("POST", "/_config"):
            return self._configure(request.body)
        if route == ("POST", "/_reset"):
            return self._reset(request.body)
        self.stats.missed(request.method, request.path)
        return json_response(404, error_body(404, f"no route {request.method} {request.path}"))

    def _configure(self, raw: bytes) -> Response:
        try:
            patch = json.loads(raw or b"{}")
            if not isinstance(patch, dict):
                raise ValueError("the body must be a JSON object")
            config = self.faults.configure(patch)
        except ValueError as exc:  # pydantic's ValidationError included
            return json_response(400, error_body(400, str(exc)))
        return json_response(200, config.model_dump())

    def _reset(self, raw: bytes) -> Response:
        try:
            options = json.loads(raw) if raw else {}
        except ValueError:
            options = None
        if not isinstance(options, dict):
            return json_response(400, error_body(400, "the body must be a JSON object"))
        self.faults.reset(self.initial_config if options.get("config") else None)
        self.stats.reset()
        self.batches.reset()
        self.quota.reset()
        return json_response(200, {"ok": True})

    async def _inference(self, kind: str, request: Request) -> Response | None:
        try:
            body = json.loads(request.body) if request.body else {}
        except ValueError:
            body = None
        record = {"path": request.path, "method": request.method, "headers": request.headers, "body": body}
        if not isinstance(body, dict):
            self.stats.arrived("", record)
            self.stats.answered(400)
            return json_response(400, error_body(400, "the body must be a JSON object"))
        prompt = prompt_text(kind, body)
        self.stats.arrived(prompt, record)
        config = self.faults.config
        model = body.get("model")
        if config.models is not None and kind != "agent" and model not in config.models:
            self.stats.answered(404)
            message = f"The model '{model}' does not exist or you do not have access to it."
            return json_response(404, error_body(404, message))
        rejected = next((key for key in config.unsupported_params if key in body), None)
        if rejected is not None:
            self.stats.answered(400)
            message = f"Unsupported parameter: '{rejected}' is not supported with this model."
            if rejected == "max_tokens":
                message += " Use 'max_completion_tokens' instead."
            return json_response(400, error_body(400, message))
        if config.capacity is not None and self.stats.in_flight >= config.capacity:
            self.stats.answered(429)
            return json_response(429, error_body(429, "server at capacity"), _retry_headers(config.retry_after))
        admission = self.quota.admit(config.quota, prompt, body)
        if admission.refusal is not None:
            self.stats.answered(429)
            return admission.refusal
        outcome = self.faults.decide(prompt)
        self.stats.enter()
        try:
            if outcome.delay_s > 0:
                await asyncio.sleep(outcome.delay_s)
            response = self._act(kind, body, prompt, outcome)
            self.quota.settle(config.quota, admission, response)
        finally:
            self.stats.leave()
        self.stats.answered(response.status if response is not None else "reset")
        return response

    def _answer_line(self, kind: str, body: dict[str, Any]) -> tuple[int, Any]:
        """One batch line, answered as ``_inference`` answers the same body online (rules and faults included)."""
        prompt = prompt_text(kind, body)
        response = self._act(kind, body, prompt, self.faults.decide(prompt))
        if response is None:  # a reset has no reply: the provider reports it as a server error
            return 500, error_body(500, "the request was dropped")
        try:
            return response.status, json.loads(response.body)
        except ValueError:
            return 500, error_body(500, "the reply was not JSON")

    def _act(self, kind: str, body: dict[str, Any], prompt: str, outcome: Outcome) -> Response | None:
        action = outcome.action
        if action == "reset":
            return None
        if action == "error":
            status = outcome.status
            message = f"injected fault: HTTP {status}"
            return json_response(status, error_body(status, message), _retry_headers(outcome.retry_after))
        if action == "malformed":
            return Response(200, _MALFORMED)
        rule = outcome.rule
        text = "" if action == "empty" else self.replier.text(prompt, rule)
        self._seq += 1
        if kind == "chat":
            tool_calls = rule.tool_calls if rule is not None and action != "empty" else None
            content = (rule.reply if rule is not None else None) if tool_calls else text
            reply = chat_response(body, prompt, content, self._seq, tool_calls)
        elif kind == "completion":
            reply = completion_response(body, prompt, text, self._seq)
        else:
            reply = agent_response(prompt, text)
        if rule is not None and rule.reply_fields:
            reply.update(rule.reply_fields)
        return json_response(200, reply)


def abort_with_reset(writer: asyncio.StreamWriter) -> None:
    """Drop the connection with a TCP reset and no response."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()
