"""The one HTTP transport of every endpoint call: an ``aiohttp.ClientSession`` with our limits.

Target, judge, remote-metric, agent and preflight calls all go through ``HttpClient``. It
owns what aiohttp leaves to its caller: a cap on the reply body (decompressed bytes are
counted, so a gzip bomb fails as soon as it passes the cap), a total per-attempt deadline
(``ClientTimeout(total=...)``: one attempt never takes longer than ``request_timeout``,
whatever the server trickles), and TLS verification with an optional CA bundle. Proxies
come from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), read
once per client and decided once per host: aiohttp's own ``trust_env`` re-reads the whole
environment and looks for ``~/.netrc`` on every request, which cost 2 ms of CPU per
request (most of the client's time) with a large environment.
aiohttp's exceptions are left as they are: ``beameval.inference.classify`` is the one
place that turns them into retry decisions.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import aiohttp

from beameval.config.access import DEFAULT_MAX_RESPONSE_BYTES
from beameval.inference.errors import ResponseTooLargeError

__all__ = ["HttpClient", "HttpReply", "ssl_context"]


@dataclass(frozen=True, slots=True)
class HttpReply:
    """A fully read reply: status, headers (case-insensitive) and the decoded body."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes


@cache
def ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """The verifying TLS context for a CA bundle (the system's trust store when None); built once per bundle.

    Building a context costs about 20 ms of CPU, so engines of one process share it.
    """
    return ssl.create_default_context(cafile=ca_bundle)


class HttpClient:
    """One keep-alive pool for one endpoint, created lazily on the loop that first uses it.

    Args:
        parallelism: the most connections open at once (``TCPConnector(limit=...)``).
        timeout: seconds for one whole attempt: connect, send and read the full reply.
        headers: sent with every request (a request's own ``headers`` replace them).
        ca_bundle: a PEM file of CA certificates to trust instead of the system's.
        max_response_bytes: the largest reply body accepted, after decompression.

    """

    def __init__(
        self,
        parallelism: int,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        *,
        ca_bundle: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self._parallelism = parallelism
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._headers = dict(headers or {})
        # Sent with every body unless the defaults already say it (then aiohttp merges nothing per request).
        has_type = any(name.lower() == "content-type" for name in self._headers)
        self._json_headers: Mapping[str, str] | None = None if has_type else _JSON_HEADERS
        self._ca_bundle = ca_bundle
        self.max_response_bytes = max_response_bytes
        self._session: aiohttp.ClientSession | None = None
        self._proxies = urllib.request.getproxies_environment()
        self._proxy_by_origin: dict[tuple[str, str], str | None] = {}

    def _open(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._parallelism,
                limit_per_host=0,
                ssl=ssl_context(self._ca_bundle),
                enable_cleanup_closed=False,
            )
            session = self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                headers=self._headers,
                trust_env=False,  # proxies are resolved here, once (see _proxy_for)
                auto_decompress=True,
                skip_auto_headers=("User-Agent",),
            )
        return session

    async def post(self, url: str, *, content: bytes, headers: Mapping[str, str] | None = None) -> HttpReply:
        """POST a JSON body and return the whole reply (raises aiohttp/asyncio errors as they are)."""
        return await self.request("POST", url, content=content, headers=headers)

    async def get(self, url: str, *, headers: Mapping[str, str] | None = None) -> HttpReply:
        """GET ``url`` and return the whole reply."""
        return await self.request("GET", url, headers=headers)

    async def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | aiohttp.FormData | None = None,
        headers: Mapping[str, str] | None = None,
        read_body: bool = True,
    ) -> HttpReply:
        """Send one request; no redirects are followed (a 3xx is the reply).

        ``content`` is a JSON body (sent as ``application/json`` unless the headers say otherwise)
        or a form, sent as ``multipart/form-data`` whatever the headers say.

        With ``read_body=False`` only the status and headers are read (the body is
        ``b""`` and the connection is not reused).

        Raises:
            ResponseTooLargeError: the body (decompressed) passes ``max_response_bytes``.
        """
        session = self._open()
        data: bytes | aiohttp.Payload | None
        send_headers: Mapping[str, str] | None
        if isinstance(content, aiohttp.FormData):
            # The multipart payload's own Content-Type names its boundary: it replaces any other, defaults included.
            data = content()
            kept = {name: value for name, value in (headers or {}).items() if name.lower() != "content-type"}
            send_headers = {**kept, "Content-Type": data.content_type}
        else:
            data = content
            send_headers = self._json_headers if content is not None else None
            if headers is not None:
                send_headers = {**(send_headers or {}), **headers}
        proxy = self._proxy_for(url)
        async with session.request(
            method, url, data=data, headers=send_headers, allow_redirects=False, proxy=proxy
        ) as response:
            body = await self._read(response) if read_body else b""
            if not read_body:
                response.close()
            return HttpReply(response.status, response.headers, body)

    def _proxy_for(self, url: str) -> str | None:
        """The proxy for ``url``'s origin under the environment's rules (``NO_PROXY`` included), cached."""
        if not self._proxies:
            return None
        parts = urlsplit(url)
        origin = (parts.scheme, parts.netloc)
        if origin not in self._proxy_by_origin:
            bypass = urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]  # not in typeshed
                parts.hostname or "", self._proxies
            )
            proxy = None if bypass else self._proxies.get(parts.scheme) or self._proxies.get("all")
            self._proxy_by_origin[origin] = proxy
        return self._proxy_by_origin[origin]

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        cap = self.max_response_bytes
        declared = response.content_length
        if declared is not None and declared > cap:
            raise ResponseTooLargeError(_too_large(cap, f"it declares {declared:,} bytes"))
        if declared is not None and response.headers.get("Content-Encoding", "identity") == "identity":
            return await response.read()  # exactly the declared bytes: nothing to cap while reading
        parts: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_any():
            size += len(chunk)
            if size > cap:
                raise ResponseTooLargeError(_too_large(cap, "more was sent"))
            parts.append(chunk)
        return b"".join(parts)

    async def aclose(self) -> None:
        """Close the pool's connections (the session is reopened if the client is used again)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
            await asyncio.sleep(0)  # lets aiohttp finish closing transports before the loop moves on


_JSON_HEADERS = {"Content-Type": "application/json"}


def _too_large(cap: int, detail: str) -> str:
    return (
        f"the reply is larger than the {cap:,}-byte limit ({detail}); raise the endpoint's max_response_bytes "
        "if such replies are expected"
    )
