"""The Batch API's JSONL lines: one request per line in, one result per line out, matched by ``custom_id``.

Input line (OpenAI): ``{"custom_id": ID, "method": "POST", "url": "/v1/chat/completions",
"body": {...}}``. Output and error-file lines: ``{"id": ..., "custom_id": ID,
"response": {"status_code": 200, "request_id": ..., "body": {...}} | null, "error":
{"code": ..., "message": ...} | null}``. The body of a line is the exact request body online
mode would POST (``canonical_json``), so its response key is the online request's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from beameval.inference.classify import classify

__all__ = [
    "BatchRequest",
    "LineResult",
    "custom_id",
    "iter_file_lines",
    "parse_result_line",
    "request_line",
    "split_requests",
]

#: Error codes of lines the provider never ran (the batch expired or was cancelled first, or it was busy): retryable.
_RETRYABLE_CODES = frozenset({"batch_expired", "batch_cancelled", "rate_limit_exceeded", "server_error", "timeout"})


def custom_id(row_index: int, sample_index: int, metric_key: str | None = None) -> str:
    """The line's ``custom_id``: names the dataset row and the sample (``params.repeats``), e.g. ``row-17-sample-0``.

    A metric's request (an LLM judge's) starts with the metric key, ``llm-judge-row-17-sample-0``,
    so it never reads as the target's request of that row.
    """
    row = f"row-{row_index}-sample-{sample_index}"
    return row if metric_key is None else f"{metric_key}-{row}"


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """One request to put into a batch.

    Attributes:
        custom_id: names its row and sample.
        key: its response key (``beameval.cache.key``), the same as online mode's.
        content: the JSON body as online mode would send it (``canonical_json``).

    """

    custom_id: str
    key: str
    content: bytes


def request_line(request: BatchRequest, endpoint: str) -> bytes:
    """One input line, newline included; the body's bytes go in as they are (no second encoding)."""
    head = json.dumps({"custom_id": request.custom_id, "method": "POST", "url": endpoint}, separators=(",", ":"))
    return b"".join((head[:-1].encode(), b',"body":', request.content, b"}\n"))


def split_requests(
    requests: Iterable[BatchRequest], endpoint: str, max_requests: int, max_bytes: int
) -> tuple[list[list[BatchRequest]], list[BatchRequest]]:
    """Pack requests, in order, into as few input files as ``max_requests`` and ``max_bytes`` allow.

    Returns:
        ``(chunks, too_large)``: the chunks, and the requests whose line alone is larger
        than ``max_bytes`` (they cannot go into any batch).

    """
    chunks: list[list[BatchRequest]] = []
    too_large: list[BatchRequest] = []
    current: list[BatchRequest] = []
    size = 0
    for request in requests:
        length = len(request_line(request, endpoint))
        if length > max_bytes:
            too_large.append(request)
            continue
        if current and (len(current) >= max_requests or size + length > max_bytes):
            chunks.append(current)
            current, size = [], 0
        current.append(request)
        size += length
    if current:
        chunks.append(current)
    return chunks, too_large


@dataclass(frozen=True, slots=True)
class LineResult:
    """One line of an output or error file.

    Attributes:
        custom_id: the request it answers.
        status: the HTTP status of the request's response, when it has one.
        body: the response body when the status is 2xx, else None.
        error: why the request failed (one line), None when it succeeded.
        retryable: whether sending it again may succeed (429, 5xx, an expired or cancelled line).

    """

    custom_id: str
    status: int | None
    body: Any
    error: str | None
    retryable: bool


def parse_result_line(line: bytes, secrets: Iterable[str] = ()) -> LineResult | None:
    """Read one output- or error-file line; None for a blank or unreadable line (it names no request).

    A line with an ``error`` object, or whose response status is not 2xx, is a failure,
    classified as online mode classifies that status (``beameval.inference.classify``).
    """
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("custom_id"), str):
        return None
    cid = data["custom_id"]
    response = data.get("response") if isinstance(data.get("response"), dict) else None
    status = response.get("status_code") if response is not None else None
    status = status if isinstance(status, int) else None
    body = response.get("body") if response is not None else None
    error = data.get("error") if isinstance(data.get("error"), dict) else None
    if status is not None and 200 <= status < 300 and error is None:
        return LineResult(cid, status, body, None, False)
    if status is not None and not 200 <= status < 300:
        failure = classify(status, body=json.dumps(body) if body is not None else None, secrets=secrets)
        return LineResult(cid, status, None, f"batch line: {failure.message}", failure.retryable)
    code = str((error or {}).get("code") or "error")
    message = str((error or {}).get("message") or "the batch returned no response for this request")
    return LineResult(cid, status, None, f"batch line: {code}: {message}", code in _RETRYABLE_CODES)


def iter_file_lines(content: bytes) -> Iterator[bytes]:
    """The non-blank lines of a downloaded output or error file."""
    for line in content.splitlines():
        if line.strip():
            yield line
