"""The Files and Batches endpoints of an OpenAI-compatible API, over the project's ``HttpClient``.

``POST {base}/files`` (multipart: ``purpose=batch`` and the JSONL ``file``), ``POST
{base}/batches`` (``input_file_id``, ``endpoint``, ``completion_window: "24h"``), ``GET
{base}/batches/{id}``, ``GET {base}/batches?limit=100`` and ``GET {base}/files/{id}/content``.
``base`` is the model URL's base (``http://host/v1``; Azure OpenAI's ``https://R.openai.azure.com/openai/v1``),
and its query string (Azure's ``api-version``) goes on every call. Failures are classified
by ``beameval.inference.classify`` as online calls are: a retryable one (429, 5xx, a
reset connection, a timeout) is tried again up to ``max_retries`` times with back-off.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

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
    content: bytes | None = None
    headers: Mapping[str, str] | None = None  # None: the endpoint's own headers
    query: str = ""  # added to the model URL's query string


class BatchApiError(Exception):
    """A Files or Batches call failed for good; the message names the call and the status, never a key."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


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
        """Upload a JSONL input file with ``purpose=batch``; return its file id."""
        boundary = f"beameval-{uuid.uuid4().hex}"
        body = b"".join(
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'.encode(),
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'.encode(),
                b"Content-Type: application/jsonl\r\n\r\n",
                content,
                f"\r\n--{boundary}--\r\n".encode(),
            )
        )
        headers = {**self._headers, "Content-Type": f"multipart/form-data; boundary={boundary}"}
        reply = await self._call(_Call("POST", "/files", "uploading the batch input file", body, headers))
        return str(reply["id"])

    async def create(self, file_id: str, endpoint: str, metadata: Mapping[str, str]) -> dict[str, Any]:
        """Create a batch over an uploaded file; return the batch object."""
        payload = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h", "metadata": metadata}
        headers = {**self._headers, "Content-Type": "application/json"}
        return await self._call(_Call("POST", "/batches", "creating a batch", json.dumps(payload).encode(), headers))

    async def get(self, batch_id: str) -> dict[str, Any]:
        """The batch object: its ``status``, ``request_counts``, ``output_file_id``, ``error_file_id``."""
        return await self._call(_Call("GET", f"/batches/{batch_id}", f"polling batch {batch_id}"))

    async def recent(self) -> list[dict[str, Any]]:
        """The most recent batches (one page of 100), to find a batch whose creation was not recorded."""
        reply = await self._call(_Call("GET", "/batches", "listing batches", query="limit=100"))
        data = reply.get("data")
        return [batch for batch in data if isinstance(batch, dict)] if isinstance(data, list) else []

    async def content(self, file_id: str) -> bytes:
        """The bytes of an output or error file."""
        reply = await self._send(_Call("GET", f"/files/{file_id}/content", f"downloading file {file_id}"))
        return reply.content

    async def _call(self, call: _Call) -> dict[str, Any]:
        """``_send``, for a call whose reply is a JSON object."""
        reply = await self._send(call)
        try:
            data = json.loads(reply.content)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BatchApiError(f"{call.what}: the reply is not a JSON object", retryable=False)
        return data

    async def _send(self, call: _Call) -> HttpReply:
        """Make one call, retrying what online mode would retry; a final failure raises ``BatchApiError``."""
        url = self._url(call.path, call.query)
        headers = self._headers if call.headers is None else call.headers
        attempt = 0
        while True:
            attempt += 1
            failure: Failure | None = None
            try:
                reply = await self._http.request(call.method, url, content=call.content, headers=headers)
            except Exception as exc:  # noqa: BLE001 - classified like an online call; cancellation propagates
                failure = classify(exc, url=url, secrets=self._secrets)
            else:
                if 200 <= reply.status_code < 300:
                    return reply
                failure = classify(
                    reply.status_code, url=url, headers=reply.headers, body=reply.content, secrets=self._secrets
                )
            if not failure.retryable or attempt > self._max_retries:
                raise BatchApiError(f"{call.what}: {failure.message}", failure.retryable)
            await self._sleep(max(failure.retry_after or 0.0, min(2.0 ** (attempt - 1), 30.0)))

    def _url(self, path: str, extra_query: str) -> str:
        query = self._query.lstrip("?")
        joined = "&".join(part for part in (query, extra_query) if part)
        return f"{self._base}{path}" + (f"?{joined}" if joined else "")
