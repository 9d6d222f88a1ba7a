"""The Files and Batches endpoints of an OpenAI-compatible API, over the project's ``HttpClient``.

``POST {base}/files`` (multipart: ``purpose=batch`` and the JSONL ``file``), ``POST
{base}/batches`` (``input_file_id``, ``endpoint``, ``completion_window: "24h"``), ``GET
{base}/batches/{id}``, ``GET {base}/files/{id}/content``, ``POST {base}/batches/{id}/cancel``,
and the listings ``GET {base}/batches`` and ``GET {base}/files?purpose=batch``, read page
by page (``limit=100``, ``after``) until ``has_more`` is false. The upload's multipart body
is aiohttp's (``aiohttp.FormData``), not framed here.
``base`` is the model URL's base (``http://host/v1``; Azure OpenAI's ``https://R.openai.azure.com/openai/v1``),
and its query string (Azure's ``api-version``) goes on every call. Failures are classified
by ``beameval.inference.classify`` as online calls are: a retryable one (429, 5xx, a
reset connection, a timeout) is tried again up to ``max_retries`` times with back-off.

A call that creates something (an upload, a batch) is never sent again blindly: its reply
may have been lost after the provider acted on it, so before each new attempt the listing
is searched for what the lost attempt may have made (the file by its unique name, the
batch by its ``input_file_id``), and that is used when found. A listing that fails is an
error (``BatchApiError``), never "not found".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

import aiohttp

from beameval.inference.classify import Failure, classify
from beameval.inference.http_client import HttpClient, HttpReply
from beameval.inference.retry import header_secrets

__all__ = ["BatchApiError", "BatchClient", "batch_endpoint"]

#: The terminal statuses of a batch (OpenAI's life-cycle: validating -> in_progress -> finalizing -> completed).
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})


class _Call(NamedTuple):
    """One Files or Batches call: what ``_send`` makes, and ``what`` names in its error message."""

    method: str
    path: str
    what: str
    content: bytes | Callable[[], aiohttp.FormData] | None = None  # a form is built afresh for each attempt
    headers: Mapping[str, str] | None = None  # None: the endpoint's own headers
    query: str = ""  # added to the model URL's query string


class BatchApiError(Exception):
    """A Files or Batches call failed for good; the message names the call and the status, never a key.

    ``status`` is the HTTP status of the last reply (None when there was none): a 404 says
    the provider no longer has the batch or file.
    """

    def __init__(self, message: str, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


def batch_endpoint(request_url: str, configured: str | None = None) -> str:
    """The batch's ``endpoint`` (and each line's ``url``): ``configured``, else the request path from ``/v1/`` on.

    ``http://h/v1/chat/completions`` gives ``/v1/chat/completions``, as OpenAI requires; a path
    without ``/v1/`` is used whole.
    """
    if configured:
        return configured
    path = request_url.split("://", 1)[-1].partition("/")[2].split("?", 1)[0]
    path = "/" + path
    at = path.rfind("/v1/")
    return path[at:] if at >= 0 else path


class BatchClient:
    """One endpoint's Files and Batches API.

    Args:
        http: the transport (its pool, timeout and reply cap).
        base_url: the model URL's base, without ``/chat/completions``.
        query: the model URL's query string ("" or ``?api-version=...``), added to every call.
        headers: the endpoint's headers (the key among them).
        max_retries: retries of a retryable failure of one call.
        sleep: awaited between attempts (tests pass a fast one).

    """

    def __init__(
        self,
        http: HttpClient,
        base_url: str,
        query: str,
        headers: Mapping[str, str],
        max_retries: int,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self._http = http
        self._base = base_url.rstrip("/")
        self._query = query
        self._headers = dict(headers)
        self._secrets = header_secrets(self._headers)
        self._max_retries = max_retries
        self._sleep = sleep

    async def upload(self, content: bytes, filename: str) -> str:
        """Upload a JSONL input file with ``purpose=batch``; return its file id.

        ``filename`` must be unique: it is how a file whose upload reply was lost is found again.
        """

        def form() -> aiohttp.FormData:
            # quote_fields=False: the name goes out as written (aiohttp would percent-encode it), since
            # the listing is searched for exactly this name when the reply is lost.
            built = aiohttp.FormData(quote_fields=False)
            built.add_field("purpose", "batch")
            built.add_field("file", content, filename=filename, content_type="application/jsonl")
            return built

        async def made() -> dict[str, Any] | None:
            return await self._first(
                "/files", "listing files", lambda f: f.get("filename") == filename and f.get("bytes") == len(content)
            )

        call = _Call("POST", "/files", "uploading the batch input file", form)
        return str((await self._create(call, made))["id"])

    async def create(self, file_id: str, endpoint: str, metadata: Mapping[str, str]) -> dict[str, Any]:
        """Create a batch over an uploaded file; return the batch object."""
        payload = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h", "metadata": metadata}
        headers = {**self._headers, "Content-Type": "application/json"}
        call = _Call("POST", "/batches", "creating a batch", json.dumps(payload).encode(), headers)
        return await self._create(call, lambda: self.find_batch(file_id))

    async def get(self, batch_id: str) -> dict[str, Any]:
        """The batch object: its ``status``, ``request_counts``, ``output_file_id``, ``error_file_id``."""
        return await self._call(_Call("GET", f"/batches/{batch_id}", f"polling batch {batch_id}"))

    async def cancel(self, batch_id: str) -> dict[str, Any]:
        """Ask the provider to cancel a batch; return the batch object."""
        return await self._call(_Call("POST", f"/batches/{batch_id}/cancel", f"cancelling batch {batch_id}"))

    async def find_batch(self, file_id: str) -> dict[str, Any] | None:
        """The batch created over input file ``file_id``, from every page of the batch listing; None if none."""
        return await self._first("/batches", "listing batches", lambda b: b.get("input_file_id") == file_id)

    async def content(self, file_id: str) -> bytes:
        """The bytes of an output or error file."""
        reply = await self._send(_Call("GET", f"/files/{file_id}/content", f"downloading file {file_id}"))
        return reply.content

    async def _first(self, path: str, what: str, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """The first listed object ``wanted`` accepts, reading page after page; a failed page raises."""
        after = ""
        purpose = "purpose=batch&" if path == "/files" else ""
        while True:
            query = f"{purpose}limit=100" + (f"&after={after}" if after else "")
            page = await self._call(_Call("GET", path, what, query=query))
            data = page.get("data")
            if not isinstance(data, list):
                raise BatchApiError(f"{what}: the reply has no 'data' list", retryable=True)
            found = next((item for item in data if isinstance(item, dict) and wanted(item)), None)
            if found is not None:
                return found
            last = page.get("last_id") or (data[-1].get("id") if data and isinstance(data[-1], dict) else None)
            if not page.get("has_more") or not last or last == after:
                return None
            after = str(last)

    async def _create(self, call: _Call, made: Callable[[], Awaitable[dict[str, Any] | None]]) -> dict[str, Any]:
        """Send a creating call; after a failure that may have reached the provider, look for what it made first."""
        attempt = 0
        while True:
            attempt += 1
            if attempt > 1:
                found = await made()  # raises when the listing fails: "not found" is never assumed
                if found is not None:
                    return found
            failure = await self._attempt(call)
            if isinstance(failure, HttpReply):
                return _json_object(call, failure)
            if not failure.retryable or attempt > self._max_retries:
                lost = (await made()) if failure.retryable else None
                if lost is not None:
                    return lost
                raise BatchApiError(f"{call.what}: {failure.message}", failure.retryable, failure.status)
            await self._sleep(_backoff(failure, attempt))

    async def _call(self, call: _Call) -> dict[str, Any]:
        """``_send``, for a call whose reply is a JSON object."""
        return _json_object(call, await self._send(call))

    async def _send(self, call: _Call) -> HttpReply:
        """Make one call, retrying what online mode would retry; a final failure raises ``BatchApiError``."""
        attempt = 0
        while True:
            attempt += 1
            failure = await self._attempt(call)
            if isinstance(failure, HttpReply):
                return failure
            if not failure.retryable or attempt > self._max_retries:
                raise BatchApiError(f"{call.what}: {failure.message}", failure.retryable, failure.status)
            await self._sleep(_backoff(failure, attempt))

    async def _attempt(self, call: _Call) -> HttpReply | _Failed:
        """One attempt of ``call``: the 2xx reply, or how it failed (classified like an online call)."""
        url = self._url(call.path, call.query)
        headers = self._headers if call.headers is None else call.headers
        try:
            content = call.content() if callable(call.content) else call.content
            reply = await self._http.request(call.method, url, content=content, headers=headers)
        except Exception as exc:  # noqa: BLE001 - classified like an online call; cancellation propagates
            return _Failed(classify(exc, url=url, secrets=self._secrets), None)
        if 200 <= reply.status_code < 300:
            return reply
        failure = classify(reply.status_code, url=url, headers=reply.headers, body=reply.content, secrets=self._secrets)
        return _Failed(failure, reply.status_code)

    def _url(self, path: str, extra_query: str) -> str:
        query = self._query.lstrip("?")
        joined = "&".join(part for part in (query, extra_query) if part)
        return f"{self._base}{path}" + (f"?{joined}" if joined else "")


class _Failed(NamedTuple):
    """A failed attempt: the classification, and the reply's status when there was a reply."""

    failure: Failure
    status: int | None

    @property
    def retryable(self) -> bool:
        return self.failure.retryable

    @property
    def message(self) -> str:
        return self.failure.message


def _backoff(failed: _Failed, attempt: int) -> float:
    return max(failed.failure.retry_after or 0.0, min(2.0 ** (attempt - 1), 30.0))


def _json_object(call: _Call, reply: HttpReply) -> dict[str, Any]:
    try:
        data = json.loads(reply.content)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise BatchApiError(f"{call.what}: the reply is not a JSON object", retryable=False)
    return data
