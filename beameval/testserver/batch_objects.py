"""The Files and Batch APIs' wire shapes as the test server writes them.

A batch's state and its JSON object, a file's object and an error-file line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BatchState", "batch_object", "error_line", "file_object"]


@dataclass
class BatchState:
    """One batch as the server runs it."""

    id: str
    input_file_id: str
    endpoint: str
    created_at: float
    outcome: str
    metadata: dict[str, Any]
    status: str = "validating"
    cancel_requested: bool = False
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"total": 0, "completed": 0, "failed": 0})
    errors: dict[str, Any] | None = None
    finished_at: float | None = None


def file_object(file_id: str, purpose: str, name: str, content: bytes) -> dict[str, Any]:
    """The Files API's object for a stored file."""
    return {
        "id": file_id,
        "object": "file",
        "bytes": len(content),
        "created_at": int(time.time()),
        "filename": name,
        "purpose": purpose,
    }


def batch_object(batch: BatchState) -> dict[str, Any]:
    """The Batch API's object for ``batch``, with the timestamps its status implies."""
    stamp = int(batch.created_at)
    done = int(batch.finished_at) if batch.finished_at is not None else None
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": batch.errors,
        "input_file_id": batch.input_file_id,
        "completion_window": "24h",
        "status": batch.status,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": stamp,
        "in_progress_at": stamp if batch.status != "validating" else None,
        "expires_at": stamp + 86_400,
        "completed_at": done if batch.status == "completed" else None,
        "failed_at": done if batch.status == "failed" else None,
        "expired_at": done if batch.status == "expired" else None,
        "cancelled_at": done if batch.status == "cancelled" else None,
        "request_counts": dict(batch.counts),
        "metadata": batch.metadata,
    }


def error_line(custom_id: str | None, response: Any, code: str, message: str) -> dict[str, Any]:
    """A line of a batch's error file."""
    return {"id": None, "custom_id": custom_id, "response": response, "error": {"code": code, "message": message}}
