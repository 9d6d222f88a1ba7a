"""The OpenAI-compatible stub server and its routes, on aiohttp.web, so clients are tested against real HTTP.

aiohttp frames the requests (``Content-Length`` or chunked bodies, pipelining, keep-alive)
and parses the Files API's multipart uploads, so what a client sends is read by a real
HTTP stack. Every fault here is an HTTP-level one (a status, a delay, a body, a dropped
connection); replies whose HTTP framing itself is broken are the raw ``scripted`` server's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from beameval.testserver.batches import BatchService
from beameval.testserver.faults import FaultConfig, FaultInjector, Outcome
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
from beameval.testserver.wire import body_of, dropped, json_response, request_record

__all__ = ["MAX_BODY", "StubServer", "format_retry_after"]

_INFERENCE = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "completion",
    "/completions": "completion",
    "/agent": "agent",
    "/v1/agent": "agent",
}
_MODELS = ("/v1/models", "/models")
MAX_BODY = 64 * 1024 * 1024  # the largest request body read; aiohttp answers 413 past it
_IDLE_S = 86_400.0  # how long an idle keep-alive connection stays open: the client's pool decides, not us
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _models(served: list[str] | None) -> dict[str, Any]:
    """The models listing: the served models (``models``), else ``test-model``."""
    names = [DEFAULT_MODEL] if served is None else served
    return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "testserver"} for name in names]}


_MALFORMED = b'{"choices": [{"message": this is not JSON'


def format_retry_after(seconds: float) -> str:
    """Render seconds for ``Retry-After``: ``"2"`` for whole numbers, else ``"0.5"``."""
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def _retry_headers(seconds: float | None) -> dict[str, str] | None:
    return None if seconds is None else {"Retry-After": format_retry_after(seconds)}


class StubServer:
    """An OpenAI-compatible server with fault injection, for tests and benchmarks.

    One ``aiohttp.web.Application`` run by an ``AppRunner`` on one event loop. The
    listener is the runner's protocol factory under ``loop.create_server`` rather than a
    ``TCPSite``, because ``/_stats`` counts accepted connections and a site has no hook for them.

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
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._seq = 0

    def application(self) -> web.Application:
        """The routes: inference, retrieval, models, control, Files and Batches; any other path is a 404."""
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._guard])
        add = app.router.add_route
        for path in _INFERENCE:
            add("*", path, self._inference)  # another method: 405
        for path in RETRIEVAL_ROUTES:
            add("*", path, self._retrieval)
        for path in _MODELS:
            add("GET", path, self._models)
        add("GET", "/_stats", self._stats)
        add("GET", "/_last_request", self._last_request)
        add("GET", "/_config", self._config)
        add("POST", "/_config", self._configure)
        add("POST", "/_reset", self._reset)
        self.batches.add_routes(app.router)
        add("*", "/{path:.*}", self._missing)  # last: also what a known path with another method reaches
        return app

    async def start(self) -> int:
        """Wait ``down_for_s``, bind and start accepting; return the bound port."""
        if self.down_for_s > 0:
            await asyncio.sleep(self.down_for_s)
        # Closing ends the handlers still running (a stall) after 10 ms; aiohttp reads 0 as "wait for them".
        self._runner = web.AppRunner(
            self.application(), access_log=None, shutdown_timeout=0.01, keepalive_timeout=_IDLE_S
        )
        await self._runner.setup()
        protocol = self._runner.server
        assert protocol is not None

        def accepted() -> asyncio.Protocol:
            self.stats.connected()
            return protocol()

        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(accepted, self.host, self.port, backlog=2048)
        self.port = self._listener.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop accepting, end the running handlers and close every connection."""
        if self._listener is not None:
            self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._listener is not None:
            await self._listener.wait_closed()

    def _guarded(self, path: str) -> bool:
        """The paths that need ``api_key``: inference, retrieval, models, Files and Batches (not ``/_batches``)."""
        if path in _INFERENCE or path in RETRIEVAL_ROUTES or path in _MODELS:
            return True
        return self.batches.owns(path) and path != "/_batches"

    @web.middleware
    async def _guard(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        api_key = self.faults.config.api_key
        if api_key and self._guarded(request.path) and request.headers.get("Authorization") != f"Bearer {api_key}":
            return json_response(401, error_body(401, "invalid API key"))
        return await handler(request)

    async def _missing(self, request: web.Request) -> web.Response:
        if self.batches.owns(request.path):
            return self.batches.missing(request)
        self.stats.missed(request.method, request.path)
        return json_response(404, error_body(404, f"no route {request.method} {request.path}"))

    async def _retrieval(self, request: web.Request) -> web.Response:
        return await retrieval_reply(self, request)  # embeddings, ranking, rerank (beameval.testserver.retrieval)

    async def _models(self, request: web.Request) -> web.Response:
        return json_response(200, _models(self.faults.config.models))

    async def _stats(self, request: web.Request) -> web.Response:
        return json_response(200, {**self.stats.snapshot(), "quota": self.quota.snapshot()})

    async def _last_request(self, request: web.Request) -> web.Response:
        return json_response(200, self.stats.last_request)

    async def _config(self, request: web.Request) -> web.Response:
        return json_response(200, self.faults.config.model_dump())

    async def _configure(self, request: web.Request) -> web.Response:
        try:
            patch = json.loads(await request.read() or b"{}")
            if not isinstance(patch, dict):
                raise ValueError("the body must be a JSON object")
            config = self.faults.configure(patch)
        except ValueError as exc:  # pydantic's ValidationError included
            return json_response(400, error_body(400, str(exc)))
        return json_response(200, config.model_dump())

    async def _reset(self, request: web.Request) -> web.Response:
        raw = await request.read()
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

    async def _inference(self, request: web.Request) -> web.Response:
        if request.method != "POST":
            return json_response(405, error_body(405, "use POST"))
        kind = _INFERENCE[request.path]
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        record = request_record(request, body)
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
        if response is None:
            self.stats.answered("reset")
            return dropped(request)
        self.stats.answered(response.status)
        return response

    def _answer_line(self, kind: str, body: dict[str, Any]) -> tuple[int, Any]:
        """One batch line, answered as ``_inference`` answers the same body online (rules and faults included)."""
        prompt = prompt_text(kind, body)
        response = self._act(kind, body, prompt, self.faults.decide(prompt))
        if response is None:  # a reset has no reply: the provider reports it as a server error
            return 500, error_body(500, "the request was dropped")
        try:
            return response.status, json.loads(body_of(response))
        except ValueError:
            return 500, error_body(500, "the reply was not JSON")

    def _act(self, kind: str, body: dict[str, Any], prompt: str, outcome: Outcome) -> web.Response | None:
        action = outcome.action
        if action == "reset":
            return None
        if action == "error":
            status = outcome.status
            message = f"injected fault: HTTP {status}"
            return json_response(status, error_body(status, message), _retry_headers(outcome.retry_after))
        if action == "malformed":
            return web.Response(body=_MALFORMED, content_type="application/json")
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
