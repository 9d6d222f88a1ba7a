"""Http11Client against the real test server and against scripted loopback servers that write exact bytes."""

from __future__ import annotations

import asyncio
import gzip
import json
import signal
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

import httpx
import pytest
import trustme

from inference.classify import classify
from inference.http11 import Http11Client, HttpResponse
from inference.pool import ShardedClient, make_client, proxy_configured
from testserver.harness import ServerProcess, free_port
from testserver.scripted import HOST, ScriptedServer, Seen, Step, reply

T = TypeVar("T")

HANG_S = 10.0  # no test needs more; a leaked connection slot would otherwise wait forever
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run one test's coroutine on a fresh loop, as the other inference tests do; a hang fails in seconds."""

    async def guarded() -> T:
        return await asyncio.wait_for(main(), HANG_S)

    return asyncio.run(guarded())


def chat_body(text: str) -> bytes:
    """An OpenAI chat request body; the test server echoes ``text`` back."""
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()


async def scripted(
    steps: list[Step],
    body: Callable[[ScriptedServer, Http11Client], Awaitable[T]],
    *,
    max_connections: int = 4,
    timeout: float = 2.0,
    headers: dict[str, str] | None = None,
) -> T:
    """Start a scripted server and a client, run ``body``, close both."""
    async with ScriptedServer(steps) as server:
        client = Http11Client(max_connections, timeout, headers)
        try:
            return await body(server, client)
        finally:
            await client.aclose()


# --- the real test server -------------------------------------------------------------------------------------------


def test_round_trip_parses_reply_and_merges_headers(clean_server: ServerProcess) -> None:
    url = clean_server.base_url + "/chat/completions"
    defaults = {"Authorization": "Bearer sk-default", "X-Default": "d", "X-Shared": "from-defaults"}
    content = chat_body("hello world")

    async def main() -> tuple[HttpResponse, dict[str, Any], HttpResponse, dict[str, Any]]:
        client = Http11Client(2, 5.0, defaults)
        try:
            first = await client.post(url, content=content, headers={"X-Request": "r", "X-Shared": "per-request"})
            seen_first = clean_server.last_request()
            second = await client.post(url, content=chat_body("again"))
            seen_second = clean_server.last_request()
        finally:
            await client.aclose()
        assert seen_first is not None and seen_second is not None
        return first, seen_first, second, seen_second

    first, seen_first, second, seen_second = run(main)
    assert first.status_code == 200
    reply_body = json.loads(first.content)
    assert reply_body["object"] == "chat.completion"
    assert reply_body["choices"][0]["message"]["content"] == "hello world"
    assert first.headers["content-type"] == "application/json"
    assert first.headers["content-length"] == str(len(first.content))
    assert first.headers["connection"] == "keep-alive"
    assert all(name == name.lower() for name in first.headers)

    assert seen_first["method"] == "POST" and seen_first["path"] == "/v1/chat/completions"
    assert seen_first["body"] == json.loads(content)
    sent = seen_first["headers"]
    assert sent["host"] == f"{HOST}:{clean_server.port}"
    assert sent["authorization"] == "Bearer sk-default"
    assert sent["x-default"] == "d"
    assert sent["x-request"] == "r"
    assert sent["x-shared"] == "per-request"
    assert sent["content-length"] == str(len(content))

    assert json.loads(second.content)["choices"][0]["message"]["content"] == "again"
    assert seen_second["headers"]["x-shared"] == "from-defaults"
    assert "x-request" not in seen_second["headers"]


def test_error_status_is_returned_not_raised(clean_server: ServerProcess) -> None:
    clean_server.configure(rules=[{"match": "busy", "status": 503, "retry_after": 2}])
    url = clean_server.base_url + "/chat/completions"

    async def main() -> HttpResponse:
        client = Http11Client(1, 5.0)
        try:
            return await client.post(url, content=chat_body("busy now"))
        finally:
            await client.aclose()

    response = run(main)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert json.loads(response.content)["error"]["code"] == 503
    failure = classify(response.status_code, url=url, headers=response.headers)
    assert (failure.failure_class, failure.retry_after) == ("hard_overload", 2.0)


def test_sequential_requests_reuse_one_connection(clean_server: ServerProcess) -> None:
    url = clean_server.base_url + "/chat/completions"
    before = clean_server.stats()["connections"]

    async def main() -> list[int]:
        client = Http11Client(8, 5.0)
        try:
            return [(await client.post(url, content=chat_body(f"q{i}"))).status_code for i in range(6)]
        finally:
            await client.aclose()

    assert run(main) == [200] * 6
    stats = clean_server.stats()
    assert stats["requests"] == 6
    assert stats["connections"] - before == 1


def test_concurrent_requests_wait_for_a_free_connection(clean_server: ServerProcess) -> None:
    clean_server.configure(latency_ms=100)
    url = clean_server.base_url + "/chat/completions"
    before = clean_server.stats()["connections"]

    async def main() -> tuple[list[HttpResponse], float]:
        client = Http11Client(3, 5.0)
        try:
            started = time.monotonic()
            responses = await asyncio.gather(*(client.post(url, content=chat_body(f"c{i}")) for i in range(10)))
            return list(responses), time.monotonic() - started
        finally:
            await client.aclose()

    responses, elapsed = run(main)
    assert [r.status_code for r in responses] == [200] * 10
    assert [json.loads(r.content)["choices"][0]["message"]["content"] for r in responses] == [
        f"c{i}" for i in range(10)
    ]
    stats = clean_server.stats()
    assert stats["requests"] == 10
    assert stats["peak_in_flight"] == 3
    assert stats["connections"] - before == 3
    assert elapsed >= 0.35  # four waves of 100 ms: the other seven waited for a connection


def test_waiting_for_a_connection_past_the_timeout_raises_pool_timeout(clean_server: ServerProcess) -> None:
    """One connection, 250 ms replies, a 400 ms timeout: the third request cannot get the connection in time."""
    clean_server.configure(latency_ms=250)
    url = clean_server.base_url + "/chat/completions"

    async def main() -> list[HttpResponse | BaseException]:
        client = Http11Client(1, 0.4)
        try:
            calls = (client.post(url, content=chat_body(f"p{i}")) for i in range(3))
            return list(await asyncio.gather(*calls, return_exceptions=True))
        finally:
            await client.aclose()

    first, second, third = run(main)
    assert isinstance(first, HttpResponse) and isinstance(second, HttpResponse)
    assert isinstance(third, httpx.PoolTimeout), third
    failure = classify(third, url=url)
    assert failure.retryable and failure.failure_class == "soft_overload"
    assert clean_server.stats()["requests"] == 2


def test_server_reset_raises_read_error(clean_server: ServerProcess) -> None:
    clean_server.configure(reset_rate=1.0)
    url = clean_server.base_url + "/chat/completions"

    async def main() -> BaseException:
        client = Http11Client(1, 5.0)
        try:
            with pytest.raises(httpx.ReadError) as caught:
                await client.post(url, content=chat_body("x"))
            return caught.value
        finally:
            await client.aclose()

    failure = classify(run(main), url=url)
    assert failure.retryable and failure.failure_class == "transient"
    assert clean_server.stats()["by_status"] == {"reset": 1}


# --- framing, against scripted servers ------------------------------------------------------------------------------


def test_request_bytes_on_the_wire() -> None:
    content = b'{"a": 1}'

    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[Seen], int]:
        await client.post(server.url("/v1/x?a=1&b=two#frag"), content=content, headers={"X-Req": "1"})
        await client.post(f"http://{HOST}:{server.port}", content=b"")
        return list(server.requests), server.port

    (first, second), port = run(lambda: scripted([Step(reply()), Step(reply())], main, headers={"Authorization": "k"}))
    assert first.request_line == "POST /v1/x?a=1&b=two HTTP/1.1"
    assert first.header("host") == [f"{HOST}:{port}"]
    assert first.header("authorization") == ["k"]
    assert first.header("x-req") == ["1"]
    assert first.header("content-length") == [str(len(content))]
    assert first.body == content
    assert second.request_line == "POST / HTTP/1.1"
    assert second.header("content-length") == ["0"] and second.body == b""
    assert second.header("x-req") == []
    assert (first.connection, second.connection) == (0, 0)


def test_response_headers_lower_cased_and_repeats_joined() -> None:
    data = (
        b"HTTP/1.1 201 Created\r\nX-MiXed:   spaced value  \r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\n"
        b"Content-Length: 3\r\n\r\nabc"
    )

    async def main(server: ScriptedServer, client: Http11Client) -> HttpResponse:
        return await client.post(server.url(), content=b"{}")

    response = run(lambda: scripted([Step(data)], main))
    assert response.status_code == 201
    assert response.content == b"abc"
    assert response.headers == {"x-mixed": "spaced value", "set-cookie": "a=1, b=2", "content-length": "3"}


def test_chunked_body_with_extensions_and_trailers_keeps_the_connection() -> None:
    data = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n"
        b"1\r\n \r\n"
        b"A\r\n0123456789\r\n"
        b"4 ; x=y\r\na\r\nb\r\n"
        b"0\r\nX-Trailer: t\r\nX-Other: u\r\n\r\n"
    )

    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[HttpResponse], int]:
        responses = [await client.post(server.url(), content=b"{}") for _ in range(2)]
        return responses, server.connections

    (first, second), connections = run(lambda: scripted([Step(data), Step(reply(body=b"next"))], main))
    assert first.status_code == 200
    assert first.content == b"hello 0123456789a\r\nb"
    assert second.content == b"next"
    assert connections == 1


def test_chunked_body_byte_by_byte() -> None:
    data = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: t\r\n\r\n"
    )

    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[bytes], int]:
        bodies = [(await client.post(server.url(), content=b"{}")).content for _ in range(2)]
        return bodies, server.connections

    bodies, connections = run(lambda: scripted([Step(data, split=True), Step(reply(body=b"ok"))], main))
    assert bodies == [b"abc0123456789abcdef", b"ok"]
    assert connections == 1


def test_reply_split_into_single_bytes() -> None:
    data = reply(200, b'{"answer": 42}', {"Content-Type": "application/json", "X-A": "b"})

    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[HttpResponse], int]:
        responses = [await client.post(server.url(), content=b"{}") for _ in range(2)]
        return responses, server.connections

    (first, second), connections = run(lambda: scripted([Step(data, split=True), Step(reply())], main))
    assert first.status_code == 200
    assert json.loads(first.content) == {"answer": 42}
    assert first.headers["x-a"] == "b"
    assert second.content == b"ok"
    assert connections == 1


@pytest.mark.parametrize(
    "head",
    [b"HTTP/1.1 200 OK\r\n\r\n", b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n"],
    ids=["http11-no-length", "http10"],
)
def test_body_delimited_by_close(head: bytes) -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[HttpResponse], int]:
        responses = [await client.post(server.url(), content=b"{}") for _ in range(2)]
        return responses, server.connections

    steps = [Step(head + b"everything until\r\nthe close", then="close"), Step(reply(body=b"fresh"))]
    (first, second), connections = run(lambda: scripted(steps, main, max_connections=1))
    assert first.status_code == 200
    assert first.content == b"everything until\r\nthe close"
    assert second.content == b"fresh"
    assert connections == 2


@pytest.mark.parametrize(
    "interim",
    [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"],
    ids=["100", "103"],
)
def test_interim_replies_are_skipped(interim: bytes) -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> HttpResponse:
        return await client.post(server.url(), content=b"{}")

    response = run(lambda: scripted([Step(interim + reply(200, b"real", {"X-Final": "1"}))], main))
    assert response.status_code == 200
    assert response.content == b"real"
    assert response.headers == {"x-final": "1", "content-length": "4"}


def test_connection_close_reply_opens_a_new_connection() -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[bytes], list[int]]:
        bodies = [(await client.post(server.url(), content=b"{}")).content for _ in range(3)]
        return bodies, [seen.connection for seen in server.requests]

    steps = [Step(reply(body=b"one", headers={"Connection": "close"}), then="hang"), Step(reply(body=b"two"))]
    steps.append(Step(reply(body=b"three")))
    bodies, connections = run(lambda: scripted(steps, main, max_connections=1))
    assert bodies == [b"one", b"two", b"three"]
    assert connections == [0, 1, 1]  # the client dropped the first one itself, though the server kept it open


def test_extra_bytes_after_the_body_drop_the_connection() -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[bytes], list[int]]:
        bodies = [(await client.post(server.url(), content=b"{}")).content for _ in range(2)]
        return bodies, [seen.connection for seen in server.requests]

    steps = [Step(reply(body=b"ok") + b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"), Step(reply(body=b"new"))]
    bodies, connections = run(lambda: scripted(steps, main, max_connections=1))
    assert bodies == [b"ok", b"new"]
    assert connections == [0, 1]


@pytest.mark.parametrize(
    "status_head",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    ],
    ids=["204", "204-length-0", "304-length-ignored", "200-empty"],
)
def test_empty_bodies_complete_at_once(status_head: bytes) -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[HttpResponse], int, float]:
        started = time.monotonic()
        responses = [await client.post(server.url(), content=b"{}") for _ in range(2)]
        return responses, server.connections, time.monotonic() - started

    (first, second), connections, elapsed = run(
        lambda: scripted([Step(status_head), Step(reply(body=b"after"))], main, timeout=2.0)
    )
    assert first.status_code == int(status_head.split()[1])
    assert first.content == b""
    assert second.content == b"after"
    assert connections == 1
    assert elapsed < 1.0


@pytest.mark.parametrize(
    "data",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n",
        b"SPDY/3 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nNo colon here\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * (65 * 1024),
    ],
    ids=["no-version", "status-not-a-number", "not-http", "header-no-colon", "bad-length", "bad-chunk", "huge-head"],
)
def test_malformed_reply_raises_remote_protocol_error_and_frees_the_slot(data: bytes) -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[HttpResponse, list[int]]:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post(server.url(), content=b"{}")
        after = await client.post(server.url(), content=b"{}")  # one connection allowed: it must be free again
        return after, [seen.connection for seen in server.requests]

    after, connections = run(
        lambda: scripted([Step(data, then="hang"), Step(reply(body=b"fine"))], main, max_connections=1)
    )
    assert after.content == b"fine"
    assert connections == [0, 1]


@pytest.mark.parametrize(
    ("step", "errors"),
    [
        (Step(then="close"), (httpx.RemoteProtocolError, httpx.ReadError)),
        (Step(then="reset"), (httpx.ReadError,)),
        (Step(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", then="close"), (httpx.RemoteProtocolError,)),
        (Step(b"HTTP/1.1 200 OK\r\nContent-Le", then="close"), (httpx.RemoteProtocolError,)),
        (
            Step(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", then="close"),
            (httpx.RemoteProtocolError,),
        ),
    ],
    ids=["fin", "rst", "short-body", "partial-head", "partial-chunk"],
)
def test_server_closing_before_a_complete_reply(step: Step, errors: tuple[type[Exception], ...]) -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[BaseException, HttpResponse]:
        with pytest.raises(errors) as caught:
            await client.post(server.url(), content=b"{}")
        after = await client.post(server.url(), content=b"{}")
        return caught.value, after

    exc, after = run(lambda: scripted([step, Step(reply(body=b"fine"))], main, max_connections=1))
    failure = classify(exc, url="http://127.0.0.1/v1")
    assert failure.retryable and failure.failure_class == "transient"
    assert "reset or closed" in failure.message
    assert after.content == b"fine"


@pytest.mark.parametrize(
    "data",
    [b"", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"],
    ids=["silent", "partial-head", "partial-body"],
)
def test_no_reply_times_out_within_the_timeout(data: bytes) -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[BaseException, float, HttpResponse, int]:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout) as caught:
            await client.post(server.url(), content=b"{}")
        elapsed = time.monotonic() - started
        await server.wait_for(lambda: server.closed_by_client == 1)  # the client dropped the stuck connection
        after = await client.post(server.url(), content=b"{}")
        return caught.value, elapsed, after, server.connections

    exc, elapsed, after, connections = run(
        lambda: scripted([Step(data, then="hang"), Step(reply())], main, max_connections=1, timeout=0.3)
    )
    assert 0.28 <= elapsed < 0.8
    assert after.status_code == 200
    assert connections == 2
    assert classify(exc).failure_class == "soft_overload"


def test_connection_refused_raises_connect_error() -> None:
    url = f"http://{HOST}:{free_port()}/v1/chat/completions"

    async def main() -> BaseException:
        client = Http11Client(1, 2.0)
        try:
            with pytest.raises(httpx.ConnectError) as caught:
                await client.post(url, content=b"{}")
            with pytest.raises(httpx.ConnectError):  # the failed connect gave its slot back
                await client.post(url, content=b"{}")
            return caught.value
        finally:
            await client.aclose()

    failure = classify(run(main), url=url)
    assert "connection refused" in failure.message
    assert failure.retryable and failure.failure_class == "transient"


def test_idle_connection_closed_by_server_is_replaced() -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[bytes], list[int]]:
        first = await client.post(server.url(), content=b"{}")
        await asyncio.sleep(0.1)  # idle: the server's FIN arrives and the client notices it
        second = await client.post(server.url(), content=b"{}")
        return [first.content, second.content], [seen.connection for seen in server.requests]

    steps = [Step(reply(body=b"one", headers={"Connection": "keep-alive"}), then="close"), Step(reply(body=b"two"))]
    bodies, connections = run(lambda: scripted(steps, main, max_connections=1))
    assert bodies == [b"one", b"two"]
    assert connections == [0, 1]


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nX-Injected: 1", "a\rb", "a\0b"])
def test_header_with_line_break_is_refused_and_nothing_sent(value: str) -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> list[Seen]:
        await client.post(server.url(), content=b"{}")
        with pytest.raises(httpx.LocalProtocolError):
            await client.post(server.url(), content=b'{"x": 1}', headers={"X-Bad": value})
        with pytest.raises(httpx.LocalProtocolError):
            await client.post(server.url(), content=b'{"x": 1}', headers={f"X-{value}": "v"})
        await client.post(server.url(), content=b"{}")
        return list(server.requests)

    seen = run(lambda: scripted([Step(reply()), Step(reply())], main))
    assert len(seen) == 2
    assert all(s.body == b"{}" and s.header("x-injected") == [] and s.header("x-bad") == [] for s in seen)
    with pytest.raises(httpx.LocalProtocolError):
        Http11Client(1, 1.0, {"X-Default": value})


def test_non_latin1_header_is_refused() -> None:
    with pytest.raises(httpx.LocalProtocolError):
        Http11Client(1, 1.0, {"X-Name": "snowman \u2603"})


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://127.0.0.1/file", httpx.UnsupportedProtocol),
        ("127.0.0.1:8000/v1", httpx.UnsupportedProtocol),
        ("http://127.0.0.1:notaport/v1", httpx.InvalidURL),
        ("http:///v1/chat", httpx.InvalidURL),
    ],
)
def test_bad_urls_raise_before_connecting(url: str, error: type[Exception]) -> None:
    async def main() -> BaseException:
        client = Http11Client(1, 1.0)
        try:
            with pytest.raises(error) as caught:
                await client.post(url, content=b"{}")
            return caught.value
        finally:
            await client.aclose()

    failure = classify(run(main), url=url)
    assert (failure.failure_class, failure.retryable) == ("fatal", False)
    assert "invalid endpoint URL" in failure.message


# --- pool behaviour -------------------------------------------------------------------------------------------------


def test_cancelled_requests_give_their_connection_back() -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[HttpResponse, int]:
        in_flight = asyncio.create_task(client.post(server.url(), content=b"{}"))
        await server.wait_for(lambda: len(server.requests) == 1)
        waiting = asyncio.create_task(client.post(server.url(), content=b"{}"))
        await asyncio.sleep(0.02)
        assert not waiting.done()  # one connection allowed, and it is busy
        waiting.cancel()
        in_flight.cancel()
        for task in (waiting, in_flight):
            with pytest.raises(asyncio.CancelledError):
                await task
        after = await asyncio.wait_for(client.post(server.url(), content=b"{}"), 1.0)
        return after, server.connections

    after, connections = run(lambda: scripted([Step(then="hang"), Step(reply(body=b"free"))], main, max_connections=1))
    assert after.content == b"free"
    assert connections == 2


def test_aclose_closes_idle_connections_and_refuses_new_requests() -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> tuple[int, int, str]:
        await asyncio.gather(*(client.post(server.url(), content=b"{}") for _ in range(2)))
        opened = server.connections
        await client.aclose()
        await server.wait_for(lambda: server.closed_by_client == opened)
        with pytest.raises(httpx.ConnectError) as caught:
            await client.post(server.url(), content=b"{}")
        return opened, len(server.requests), str(caught.value)

    opened, requests, message = run(lambda: scripted([Step(reply()), Step(reply())], main, max_connections=2))
    assert opened == 2
    assert requests == 2
    assert "closed" in message


def test_aclose_fails_requests_waiting_for_a_connection() -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> None:
        in_flight = asyncio.create_task(client.post(server.url(), content=b"{}"))
        await server.wait_for(lambda: len(server.requests) == 1)
        waiting = asyncio.create_task(client.post(server.url(), content=b"{}"))
        await asyncio.sleep(0.02)
        await client.aclose()
        with pytest.raises(httpx.ConnectError, match="closed"):
            await asyncio.wait_for(waiting, 1.0)
        in_flight.cancel()
        with pytest.raises(asyncio.CancelledError):
            await in_flight

    run(lambda: scripted([Step(then="hang")], main, max_connections=1))


# --- client choice --------------------------------------------------------------------------------------------------


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Clear every proxy variable, so the host's environment cannot pick the client."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def test_make_client_is_http11_without_a_proxy(no_proxy_env: pytest.MonkeyPatch) -> None:
    assert not proxy_configured()
    client = make_client(4, 5.0, {"X": "1"})
    assert isinstance(client, Http11Client)
    run(client.aclose)


@pytest.mark.parametrize("name", ["HTTPS_PROXY", "http_proxy", "ALL_PROXY"])
def test_make_client_is_httpx_with_a_proxy(no_proxy_env: pytest.MonkeyPatch, name: str) -> None:
    no_proxy_env.setenv(name, "http://127.0.0.1:9")
    assert proxy_configured()
    client = make_client(4, 5.0, {"X": "1"})
    assert isinstance(client, ShardedClient)
    run(client.aclose)


# --- TLS ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a trustme certificate for 127.0.0.1, and a client context trusting its CA."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(HOST, "localhost").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    return server_context, client_context


def test_https_round_trip_and_reuse(tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_context, client_context = tls_contexts

    async def main() -> tuple[list[HttpResponse], list[Seen], int]:
        steps = [Step(reply(body=b"secure")), Step(reply(body=b"again"))]
        async with ScriptedServer(steps, server_context) as server:
            client = Http11Client(2, 5.0, {"Authorization": "Bearer k"}, ssl_context=client_context)
            try:
                responses = [await client.post(server.url(), content=b'{"q": 1}') for _ in range(2)]
            finally:
                await client.aclose()
            assert server.url().startswith("https://")
            return responses, list(server.requests), server.connections

    responses, seen, connections = run(main)
    assert [(r.status_code, r.content) for r in responses] == [(200, b"secure"), (200, b"again")]
    assert seen[0].request_line == "POST /v1/chat/completions HTTP/1.1"
    assert seen[0].header("authorization") == ["Bearer k"]
    assert seen[0].body == b'{"q": 1}'
    assert connections == 1


def test_https_untrusted_certificate_raises_connect_error(tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_context, _ = tls_contexts

    async def main() -> BaseException:
        async with ScriptedServer([Step(reply())], server_context) as server:
            client = Http11Client(1, 5.0, ssl_context=ssl.create_default_context())  # system CAs only
            try:
                with pytest.raises(httpx.ConnectError) as caught:
                    await client.post(server.url(), content=b"{}")
            finally:
                await client.aclose()
            assert server.requests == []
            return caught.value

    exc = run(main)
    assert "CERTIFICATE_VERIFY_FAILED" in str(exc)


def test_tls_handshake_that_never_completes_raises_connect_timeout(
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    _, client_context = tls_contexts

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accept TCP, never answer the ClientHello
        writer.close()

    async def main() -> tuple[BaseException, float]:
        server = await asyncio.start_server(silent, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        client = Http11Client(1, 0.3, ssl_context=client_context)
        try:
            started = time.monotonic()
            with pytest.raises(httpx.ConnectTimeout) as caught:
                await client.post(f"https://{HOST}:{port}/v1", content=b"{}")
            return caught.value, time.monotonic() - started
        finally:
            await client.aclose()
            server.close()
            await server.wait_closed()

    exc, elapsed = run(main)
    assert 0.28 <= elapsed < 0.8
    failure = classify(exc, url="https://127.0.0.1/v1")
    assert failure.message.startswith("timed out connecting") and failure.retryable


# --- header merging, closed-connection reuse, URL encoding ------------------------------------------------------


def test_per_request_header_replaces_default_case_insensitively() -> None:
    """httpx merges headers by case-insensitive name; sending both values lets servers pick the stale one."""

    async def main(server: ScriptedServer, client: Http11Client) -> Seen:
        await client.post(server.url(), content=b"{}", headers={"authorization": "Bearer per-request"})
        return server.requests[0]

    seen = run(lambda: scripted([Step(reply())], main, headers={"Authorization": "Bearer default"}))
    assert seen.header("authorization") == ["Bearer per-request"]


def test_host_header_given_by_caller_replaces_the_automatic_one() -> None:
    """A configured Host (virtual host behind an IP URL) must not become a second Host line (RFC 9112: 400)."""

    async def main(server: ScriptedServer, client: Http11Client) -> list[list[str]]:
        await client.post(server.url(), content=b"{}")
        await client.post(server.url(), content=b"{}", headers={"host": "per-request.example.com"})
        return [seen.header("host") for seen in server.requests]

    hosts = run(lambda: scripted([Step(reply()), Step(reply())], main, headers={"HOST": "api.example.com"}))
    assert hosts == [["api.example.com"], ["per-request.example.com"]]


def test_connection_closed_right_after_a_reply_is_not_reused() -> None:
    """The server sends a full keep-alive reply and closes at once; the next request follows at once.

    The FIN is already in the client's socket buffer, but the loop has not read it yet, so the
    connection still looks idle and reusable; like httpx, the client asks the socket before reuse.
    """

    async def main(server: ScriptedServer, client: Http11Client) -> tuple[list[bytes], list[int]]:
        first = await client.post(server.url(), content=b"{}")
        second = await client.post(server.url(), content=b"{}")
        return [first.content, second.content], [seen.connection for seen in server.requests]

    steps = [Step(reply(body=b"one", headers={"Connection": "keep-alive"}), then="close"), Step(reply(body=b"two"))]
    bodies, connections = run(lambda: scripted(steps, main, max_connections=1))
    assert bodies == [b"one", b"two"]
    assert connections == [0, 1]


@pytest.mark.parametrize(
    ("path", "encoded"),
    [("/v1/a b", "/v1/a%20b"), ("/v1/caf\u00e9", "/v1/caf%C3%A9")],
    ids=["space", "non-ascii"],
)
def test_url_path_is_percent_encoded_or_refused(path: str, encoded: str) -> None:
    """Like httpx, percent-encode: a raw space makes an invalid request line, non-ASCII cannot be sent at all."""

    async def main(server: ScriptedServer, client: Http11Client) -> str | BaseException:
        try:
            await client.post(server.url(path), content=b"{}")
        except Exception as exc:  # the contract: only httpx exception classes, so classify can read them
            return exc
        return server.requests[0].request_line

    outcome = run(lambda: scripted([Step(reply())], main))
    if isinstance(outcome, BaseException):
        assert isinstance(outcome, httpx.InvalidURL), f"{type(outcome).__name__}: {outcome}"
    else:
        assert outcome == f"POST {encoded} HTTP/1.1"


# --- compressed replies and the default User-Agent ------------------------------------------------------------------


PAYLOAD = b'{"choices": [{"message": {"content": "zipped"}}]}'


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("encoding", "encoded"),
    [
        ("gzip", gzip.compress(PAYLOAD)),
        ("deflate", zlib.compress(PAYLOAD)),
        ("deflate", _raw_deflate(PAYLOAD)),
        ("identity", PAYLOAD),
    ],
    ids=["gzip", "deflate-zlib", "deflate-raw", "identity"],
)
def test_compressed_replies_are_decoded(encoding: str, encoded: bytes) -> None:
    """We never ask for compression, but some servers compress anyway; the JSON must still come through."""

    async def main(server: ScriptedServer, client: Http11Client) -> tuple[HttpResponse, list[str]]:
        response = await client.post(server.url(), content=b"{}")
        return response, server.requests[0].header("accept-encoding")

    step = Step(reply(body=encoded, headers={"Content-Encoding": encoding}))
    response, accept_encoding = run(lambda: scripted([step], main))
    assert response.content == PAYLOAD
    assert accept_encoding == []


@pytest.mark.parametrize(
    ("encoding", "encoded", "message"),
    [("br", b"\x0b\x02\x80", "Content-Encoding 'br'"), ("gzip", b"not gzip at all", "cannot be decoded")],
    ids=["unsupported", "corrupt"],
)
def test_undecodable_replies_fail_for_good_with_a_reason(encoding: str, encoded: bytes, message: str) -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> BaseException:
        with pytest.raises(httpx.DecodingError) as caught:
            await client.post(server.url(), content=b"{}")
        return caught.value

    exc = run(lambda: scripted([Step(reply(body=encoded, headers={"Content-Encoding": encoding}))], main))
    assert message in str(exc)
    failure = classify(exc, url="http://127.0.0.1/v1")
    assert not failure.retryable and "cannot be read" in failure.message


def test_a_user_agent_is_sent_unless_the_caller_sets_one() -> None:
    async def main(server: ScriptedServer, client: Http11Client) -> list[list[str]]:
        await client.post(server.url(), content=b"{}")
        await client.post(server.url(), content=b"{}", headers={"user-agent": "mine/1.0"})
        return [seen.header("user-agent") for seen in server.requests]

    agents = run(lambda: scripted([Step(reply()), Step(reply())], main))
    assert agents == [["beam-llm-evaluator"], ["mine/1.0"]]


# --- framing a lenient parser would get wrong (a broken proxy or a hostile peer) --------------------------------------


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


async def post_once(data: bytes, timeout: float = 2.0) -> HttpResponse | BaseException:
    """One POST to a server that answers ``data``; the reply, or the exception raised."""

    async def main(server: ScriptedServer, client: Http11Client) -> HttpResponse | BaseException:
        try:
            return await client.post(server.url(), content=b"{}")
        except Exception as exc:
            return exc

    return await scripted([Step(data)], main, max_connections=1, timeout=timeout)


class _Spinning(Exception):
    pass


@contextmanager
def cpu_watchdog(seconds: float) -> Iterator[None]:
    """Interrupt code that burns ``seconds`` of CPU (SIGVTALRM: leaves pytest-timeout's SIGALRM alone)."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _Spinning(f"busy for {seconds:g} s of CPU: a parser loop that never ends")

    previous = signal.signal(signal.SIGVTALRM, on_signal)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


@pytest.mark.parametrize(
    "body",
    [b"-1000\r\nhello\r\n0\r\n\r\n", b"0x5\r\nhello\r\n0\r\n\r\n", b"5\r\nhello!\r\n0\r\n\r\n"],
    ids=["negative-size", "0x-prefix", "no-crlf-after-data"],
)
def test_malformed_chunks_are_protocol_errors(body: bytes) -> None:
    """A negative size once made the parser loop forever inside data_received, hanging the whole event loop."""
    with cpu_watchdog(1.0):
        outcome = run(lambda: post_once(CHUNKED_HEAD + body))
    assert isinstance(outcome, httpx.RemoteProtocolError), outcome


@pytest.mark.parametrize(
    ("lengths", "body"),
    [(["-2"], b"5\r\nhello\r\n0\r\n\r\n"), (["-1"], b"hello"), (["3", "5"], b"hello"), (["+5"], b"hello")],
    ids=["minus-2", "minus-1", "conflicting", "plus-sign"],
)
def test_malformed_content_lengths_are_protocol_errors_at_once(lengths: list[str], body: bytes) -> None:
    """Only digits, and repeats must agree (RFC 9112 6.3); -1 used to wait for a close until the timeout."""
    head = "".join(f"Content-Length: {length}\r\n" for length in lengths).encode()
    started = time.monotonic()
    outcome = run(lambda: post_once(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n" + body, timeout=1.0))
    assert isinstance(outcome, httpx.RemoteProtocolError), outcome
    assert time.monotonic() - started < 0.9


def test_identical_repeated_content_lengths_are_accepted() -> None:
    outcome = run(lambda: post_once(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length: 5 \r\n\r\nhello"))
    assert isinstance(outcome, HttpResponse) and outcome.content == b"hello", outcome


def test_credentials_in_the_url_are_refused_and_nothing_is_sent() -> None:
    """httpx would turn user:password@ into Basic auth; keys belong in api_key_env, so the URL is refused."""

    async def main(server: ScriptedServer, client: Http11Client) -> tuple[BaseException, int]:
        with pytest.raises(httpx.InvalidURL) as caught:
            await client.post(server.url(userinfo="user:s3cr3t@"), content=b"{}")
        return caught.value, len(server.requests)

    exc, sent = run(lambda: scripted([Step(reply())], main))
    assert "credentials" in str(exc) and "s3cr3t" not in str(exc)
    assert sent == 0


def test_a_request_cancelled_as_the_connection_is_handed_to_it_sends_nothing() -> None:
    """One connection: A in flight, B waiting. A's release hands the connection to B, cancelled before B runs.

    ``asyncio.wait_for`` on Python 3.10-3.11 returns the inner result and swallows such a cancel, so B
    went on to send; the waiter is now awaited directly and the connection goes back to the pool.
    """
    release = asyncio.Event()

    async def main(server: ScriptedServer, client: Http11Client) -> tuple[BaseException | HttpResponse, int]:
        second: asyncio.Task[HttpResponse] | None = None

        async def first_then_cancel_second() -> HttpResponse:
            response = await client.post(server.url(), content=b"{}")  # its release has just woken B
            assert second is not None
            second.cancel()  # in the same loop pass, before B runs
            return response

        first = asyncio.create_task(first_then_cancel_second())
        await server.wait_for(lambda: len(server.requests) == 1)
        second = asyncio.create_task(client.post(server.url(), content=b"{}"))
        await asyncio.sleep(0.02)  # B now waits for the only connection
        release.set()
        assert (await first).content == b"held"
        try:
            outcome: BaseException | HttpResponse = await second
        except asyncio.CancelledError as exc:
            outcome = exc
        third = await client.post(server.url(), content=b"{}")  # the connection came back to the pool
        assert third.content == b"C"
        return outcome, server.connections

    steps = [Step(reply(body=b"held"), hold=release), Step(reply(body=b"C"))]
    outcome, connections = run(lambda: scripted(steps, main, max_connections=1))
    assert isinstance(outcome, asyncio.CancelledError), outcome
    assert connections == 1  # B sent nothing, and the third request reused A's connection
