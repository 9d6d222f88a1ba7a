"""HttpClient (aiohttp) against real loopback servers: TLS, proxies, size caps, stalls.

The scripted server writes exactly the bytes a test gives it, so each limit is exercised
on the wire; the proxy is our own forwarding proxy on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import email
import gzip
import json
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest
import trustme

from beameval.config import ModelTarget, Params, TargetConfig
from beameval.inference.classify import classify
from beameval.inference.errors import ResponseTooLargeError
from beameval.inference.http_client import HttpClient
from beameval.inference.limiter import AdaptiveLimiter
from beameval.inference.retry import RetryPolicy, call_with_retries
from beameval.inference.targets import make_handler
from beameval.testserver.proxy import ForwardingProxy
from beameval.testserver.scripted import ScriptedServer, Step, reply

T = TypeVar("T")
OK = json.dumps({"choices": [{"message": {"role": "assistant", "content": "fine"}}]}).encode()
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
PROXY_VARS += tuple(name.lower() for name in PROXY_VARS)


def run(main: Callable[[], Awaitable[T]], limit_s: float = 10.0) -> T:
    async def guarded() -> T:
        return await asyncio.wait_for(main(), limit_s)

    return asyncio.run(guarded())


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_server_context(ca: trustme.CA) -> ssl.SSLContext:
    """A server certificate for the hostname ``localhost`` (and 127.0.0.1), signed by a test CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    return context


@pytest.fixture
def ca_bundle(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def test_plain_round_trip_sends_json_and_default_headers(no_proxy_env: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        async with ScriptedServer([Step(reply(200, OK, {"X-Reply": "1"}))]) as server:
            client = HttpClient(2, 5.0, {"Authorization": "Bearer k"})
            try:
                got = await client.post(server.url(), content=b'{"a": 1}')
            finally:
                await client.aclose()
            assert (got.status_code, got.content, got.headers["x-reply"]) == (200, OK, "1")
            seen = server.requests[0]
            assert seen.request_line == "POST /v1/chat/completions HTTP/1.1"
            assert seen.header("authorization") == ["Bearer k"]
            assert seen.header("content-type") == ["application/json"]
            assert seen.body == b'{"a": 1}'

    run(main)


def test_a_form_is_multipart_whatever_the_default_and_request_headers_say(no_proxy_env: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        async with ScriptedServer([Step(reply(200, OK))]) as server:
            client = HttpClient(1, 5.0, {"Content-Type": "application/json"})
            form = aiohttp.FormData(quote_fields=False)
            form.add_field("purpose", "batch")
            form.add_field("file", b'{"a": 1}\n', filename='in "1".jsonl', content_type="application/jsonl")
            try:
                await client.request("POST", server.url("/v1/files"), content=form, headers={"content-type": "x/y"})
            finally:
                await client.aclose()
            seen = server.requests[0]
            (content_type,) = seen.header("content-type")
            assert content_type.startswith("multipart/form-data; boundary=")
            assert seen.header("content-length") == [str(len(seen.body))]
            # Read back by the standard library's MIME parser, independent of aiohttp's own.
            message = email.message_from_bytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + seen.body)
            parts = [(p.get_param("name", header="content-disposition"), p) for p in message.get_payload()]
            assert [name for name, _ in parts] == ["purpose", "file"]
            assert parts[0][1].get_payload(decode=True) == b"batch"
            assert parts[1][1].get_filename() == 'in "1".jsonl'
            assert parts[1][1].get_content_type() == "application/jsonl"
            assert parts[1][1].get_payload(decode=True) == b'{"a": 1}\n'

    run(main)


def test_https_with_a_hostname_certificate_needs_the_ca_bundle(
    no_proxy_env: pytest.MonkeyPatch, tls_server_context: ssl.SSLContext, ca_bundle: str
) -> None:
    async def main() -> None:
        steps = [Step(reply(200, OK)), Step(reply(200, OK))]
        async with ScriptedServer(steps, ssl_context=tls_server_context) as server:
            url = f"https://localhost:{server.port}/v1/chat/completions"
            default = HttpClient(1, 5.0)  # the system's trust store: the test CA is not in it
            try:
                with pytest.raises(Exception) as refused:
                    await default.post(url, content=b"{}")
            finally:
                await default.aclose()
            failure = classify(refused.value, url=url)
            assert (failure.failure_class, failure.retryable) == ("fatal", False)
            assert failure.message.startswith(f"TLS with localhost:{server.port} failed: ")
            assert "certificate" in failure.message
            trusting = HttpClient(1, 5.0, ca_bundle=ca_bundle)
            try:
                first = await trusting.post(url, content=b"{}")
                second = await trusting.post(url, content=b"{}")
            finally:
                await trusting.aclose()
            assert first.content == second.content == OK
            assert server.connections == 1  # kept alive over TLS

    run(main)


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_proxy_variables_route_requests_through_the_proxy(
    no_proxy_env: pytest.MonkeyPatch, tls: bool, tls_server_context: ssl.SSLContext, ca_bundle: str
) -> None:
    async def main() -> None:
        context = tls_server_context if tls else None
        async with ScriptedServer([Step(reply(200, OK))], ssl_context=context) as server, ForwardingProxy() as proxy:
            no_proxy_env.setenv("HTTPS_PROXY" if tls else "HTTP_PROXY", proxy.url)
            host = "localhost" if tls else "127.0.0.1"
            url = f"{'https' if tls else 'http'}://{host}:{server.port}/v1/chat/completions"
            client = HttpClient(1, 5.0, ca_bundle=ca_bundle if tls else None)
            try:
                got = await client.post(url, content=b"{}")
            finally:
                await client.aclose()
            assert got.content == OK
            expected = f"CONNECT {host}:{server.port}" if tls else f"POST {url}"
            assert proxy.seen == [expected]
            assert server.requests[0].request_line == "POST /v1/chat/completions HTTP/1.1"

    run(main)


def test_no_proxy_bypasses_the_proxy(no_proxy_env: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        async with ScriptedServer([Step(reply(200, OK))]) as server, ForwardingProxy() as proxy:
            no_proxy_env.setenv("HTTP_PROXY", proxy.url)
            no_proxy_env.setenv("NO_PROXY", "127.0.0.1")
            client = HttpClient(1, 5.0)
            try:
                got = await client.post(server.url(), content=b"{}")
            finally:
                await client.aclose()
            assert got.content == OK and proxy.seen == []

    run(main)


CHUNKED_6K = (  # six 1 KiB chunks and no declared length: the cap is found while reading
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"400\r\n" + b"x" * 1024 + b"\r\n") * 6 + b"0\r\n\r\n"
)


@pytest.mark.parametrize("data", [reply(200, b"x" * 5000), CHUNKED_6K], ids=["content-length", "chunked"])
def test_a_reply_over_the_cap_fails(no_proxy_env: pytest.MonkeyPatch, data: bytes) -> None:
    async def main() -> None:
        async with ScriptedServer([Step(data)]) as server:
            client = HttpClient(1, 5.0, max_response_bytes=4096)
            try:
                with pytest.raises(ResponseTooLargeError) as too_large:
                    await client.post(server.url(), content=b"{}")
            finally:
                await client.aclose()
            assert "4,096-byte limit" in too_large.value.message
            failure = classify(too_large.value)
            assert (failure.failure_class, failure.retryable) == ("fatal", False)

    run(main)


def test_a_gzip_bomb_stops_at_the_cap_not_at_its_size(no_proxy_env: pytest.MonkeyPatch) -> None:
    bomb = gzip.compress(b"\0" * (200 * 1024 * 1024), compresslevel=9)  # 200 MiB of zeros in ~200 KB
    data = reply(200, bomb, {"Content-Encoding": "gzip", "Content-Type": "application/json"})

    async def main() -> float:
        async with ScriptedServer([Step(data)]) as server:
            client = HttpClient(1, 10.0, max_response_bytes=1024 * 1024)
            started = time.perf_counter()
            try:
                with pytest.raises(ResponseTooLargeError):
                    await client.post(server.url(), content=b"{}")
            finally:
                await client.aclose()
            return time.perf_counter() - started

    assert len(bomb) < 1024 * 1024  # the compressed reply itself is under the cap
    assert run(main) < 5.0


def test_a_reply_that_stalls_mid_body_times_out_within_the_attempt_deadline(no_proxy_env: pytest.MonkeyPatch) -> None:
    partial = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10

    async def main() -> float:
        async with ScriptedServer([Step(partial, then="hang")]) as server:
            client = HttpClient(1, 0.5)
            started = time.perf_counter()
            try:
                with pytest.raises(TimeoutError) as timed_out:
                    await client.post(server.url(), content=b"{}")
            finally:
                await client.aclose()
            assert classify(timed_out.value, url=server.url()).failure_class == "soft_overload"
            return time.perf_counter() - started

    assert 0.4 < run(main) < 2.0


def test_an_oversized_reply_is_not_retried_by_the_engine(no_proxy_env: pytest.MonkeyPatch) -> None:
    target = TargetConfig(model=ModelTarget(url="http://127.0.0.1:1/v1", name="m", format="openai"))
    handler = make_handler(target, Params(), None)

    async def main() -> None:
        async with ScriptedServer([Step(reply(200, b"y" * 9000))] * 3) as server:
            client = HttpClient(1, 5.0, max_response_bytes=4096)
            prepared = handler.prepare({"messages": [{"role": "user", "content": "q"}]})
            prepared = type(prepared)(url=server.url(), body=prepared.body, headers=prepared.headers)
            waits: list[float] = []

            async def no_sleep(seconds: float) -> None:
                waits.append(seconds)

            policy = RetryPolicy(max_retries=2, rng=random.Random(0), sleep=no_sleep)
            try:
                outcome = await call_with_retries(client, AdaptiveLimiter(1), handler, prepared, policy)
            finally:
                await client.aclose()
            assert outcome.error is not None and outcome.attempts == 1 and waits == []
            assert "larger than the 4,096-byte limit" in outcome.error.message
            assert len(server.requests) == 1

    run(main)
