"""The Files and Batches endpoints of the stub server: OpenAI's Batch API, answered by the online reply logic.

``POST /v1/files`` (multipart ``purpose=batch`` + ``file``), ``GET /v1/files`` (the most recent
first, ``purpose``), ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``DELETE
/v1/files/{id}``, ``POST /v1/batches``, ``GET /v1/batches`` (the most recent first),
``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``; the same without ``/v1``. Both
listings page as OpenAI's do: ``limit`` (default 20, at most 100) and ``after`` (the last
id of the previous page), and say ``has_more``.
A batch goes ``validating`` -> ``in_progress`` -> ``completed`` as time passes
(``validating_s``, ``completion_s``), or ends ``failed``, ``expired`` or ``cancelled`` when
``BatchConfig.outcomes`` says so for it. When it completes, every line is answered by the
server's online reply logic (the same text, usage and fault rules as ``POST
/v1/chat/completions``, so a rule with ``status: 400`` or ``fail_times`` fails lines), the
2xx answers go into the output file and the rest into the error file. Batch lines are
not counted as inference requests in ``/_stats``: ``GET /_batches`` has their own counts.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field

from beameval.testserver.batch_objects import BatchState, batch_object, error_line, file_object, multipart_fields
from beameval.testserver.http11 import Request, Response, json_response
from beameval.testserver.replies import error_body

__all__ = ["BatchConfig", "BatchService"]

#: Answers one line: ``(kind, body) -> (status, response body)``; the server's online reply logic.
Answer = Callable[[str, dict[str, Any]], tuple[int, Any]]

_ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
_MAX_LINES = 50_000  # OpenAI's limit of one batch


class BatchConfig(BaseModel):
    """The batch knobs (``POST /_batches`` with any of these fields).

    Attributes:
        validating_s: seconds a new batch stays ``validating``.
        completion_s: seconds from creation until the batch ends (``completed`` or its outcome).
        outcomes: how the next batches end, in creation order, one entry used per batch:
            ``completed``, ``failed`` (validation failed: no files), ``expired`` or
            ``cancelled`` (no line ran: every line is in the error file with
            ``batch_expired`` / ``batch_cancelled``). Batches past the list complete.
        lose_uploads: the next this many ``POST /files`` store the file, then drop the
            connection without a reply (a reply lost on the way back).
        lose_creates: the same for the next ``POST /batches``: the batch exists, its id never arrives.
        list_failures: the next this many ``GET /batches`` and ``GET /files`` listings answer 503.
        duplicate_lines: every output line is followed by a second line for the same
            ``custom_id`` with another answer, and the file ends with a line for an unknown id.
    """

    model_config = ConfigDict(extra="forbid")

    validating_s: float = Field(default=0.0, ge=0)
    completion_s: float = Field(default=0.0, ge=0)
    outcomes: list[Literal["completed", "failed", "expired", "cancelled"]] = Field(default_factory=list)
    lose_uploads: int = Field(default=0, ge=0)
    lose_creates: int = Field(default=0, ge=0)
    list_failures: int = Field(default=0, ge=0)
    duplicate_lines: bool = False


class BatchService:
    """The Files and Batches state of one server, and its routes.

    Args:
        answer: the server's reply logic for one request body.
    """

    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self.config = BatchConfig()
        self._ids = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        """Forget every file and batch and zero the counts (the config stays)."""
        self.files: dict[str, tuple[str, str, bytes]] = {}  # id -> (purpose, filename, content)
        self.batches: dict[str, BatchState] = {}
        self.counts = {
            "files_uploaded": 0,
            "batches_created": 0,
            "lines_answered": 0,
            "polls": 0,
            "downloads": 0,
            "listings": 0,
            "cancels": 0,
        }

    @staticmethod
    def owns(path: str) -> bool:
        """True for the paths this service answers."""
        bare = path[3:] if path.startswith("/v1/") else path
        return bare.startswith(("/files", "/batches")) or path == "/_batches"

    def handle(self, request: Request) -> Response | None:
        """Answer one Files, Batches or ``/_batches`` control request; None drops the connection (a lost reply)."""
        if request.path == "/_batches":
            return self._control(request)
        parts = (request.path[3:] if request.path.startswith("/v1/") else request.path).strip("/").split("/")
        route = (request.method, parts[0], len(parts))
        if route in (("GET", "files", 1), ("GET", "batches", 1)):
            return self._listing(parts[0], request.query)
        if route == ("POST", "files", 1):
            return self._upload(request)
        if route == ("DELETE", "files", 2) and parts[1] in self.files:
            del self.files[parts[1]]
            return json_response(200, {"id": parts[1], "object": "file", "deleted": True})
        if route == ("GET", "files", 2) and parts[1] in self.files:
            purpose, name, content = self.files[parts[1]]
            return json_response(200, file_object(parts[1], purpose, name, content))
        if route == ("GET", "files", 3) and parts[2] == "content" and parts[1] in self.files:
            self.counts["downloads"] += 1
            return Response(200, self.files[parts[1]][2], content_type="application/jsonl")
        if route == ("POST", "batches", 1):
            return self._create(request.body)
        if route[:2] == ("GET", "batches") and parts[1] in self.batches and len(parts) == 2:
            self.counts["polls"] += 1
            return json_response(200, self._advance(self.batches[parts[1]]))
        if route == ("POST", "batches", 3) and parts[2] == "cancel" and parts[1] in self.batches:
            batch = self.batches[parts[1]]
            if batch.status not in ("completed", "failed", "expired", "cancelled"):
                batch.cancel_requested = True
                self.counts["cancels"] += 1
            return json_response(200, self._advance(batch))
        return json_response(404, error_body(404, f"no such file or batch: {request.method} {request.path}"))

    def _listing(self, kind: str, query: str) -> Response:
        """One page of files or batches, the most recent first (OpenAI's ``limit``/``after``/``has_more``)."""
        self.counts["listings"] += 1
        if self.config.list_failures:
            self.config.list_failures -= 1
            return json_response(503, error_body(503, "injected fault: the listing is unavailable"))
        args = {name: values[-1] for name, values in parse_qs(query).items()}
        limit = min(max(int(args.get("limit", "20")), 1), 100)
        if kind == "files":
            purpose = args.get("purpose")
            found = [
                file_object(file_id, *stored)
                for file_id, stored in self.files.items()
                if purpose is None or stored[0] == purpose
            ]
        else:
            found = [self._advance(batch) for batch in self.batches.values()]
        found.reverse()  # ids grow with time: the most recent first
        ids = [item["id"] for item in found]
        start = ids.index(args["after"]) + 1 if args.get("after") in ids else 0
        page = found[start : start + limit]
        more = start + limit < len(found)
        first, last = (page[0]["id"], page[-1]["id"]) if page else (None, None)
        return json_response(
            200, {"object": "list", "data": page, "first_id": first, "last_id": last, "has_more": more}
        )

    def _control(self, request: Request) -> Response:
        if request.method == "POST":
            try:
                patch = json.loads(request.body or b"{}")
                for batch_id in patch.pop("forget_batches", []):  # the provider no longer has them: 404
                    self.batches.pop(batch_id, None)
                if patch.pop("finish_existing", False):  # the batches created so far end at their next poll
                    for batch in self.batches.values():
                        batch.created_at -= self.config.completion_s
                self.config = BatchConfig.model_validate({**self.config.model_dump(), **patch})
            except ValueError as exc:
                return json_response(400, error_body(400, str(exc)))
        lines = sum(batch.counts["total"] for batch in self.batches.values())
        return json_response(
            200,
            {
                "config": self.config.model_dump(),
                **self.counts,
                "lines_in_batches": lines,
                "batches": [
                    {"id": b.id, "status": b.status, "request_counts": b.counts, "custom_ids": self._custom_ids(b)}
                    for b in self.batches.values()
                ],
            },
        )

    def _upload(self, request: Request) -> Response | None:
        fields = multipart_fields(request.headers.get("content-type", ""), request.body)
        if fields is None or "file" not in fields:
            return json_response(400, error_body(400, "expected multipart/form-data with 'purpose' and 'file'"))
        purpose = fields.get("purpose", ("", b""))[1].decode("utf-8", "replace")
        if purpose != "batch":
            return json_response(400, error_body(400, f"purpose must be 'batch', got {purpose!r}"))
        name, content = fields["file"]
        file_id = f"file-{next(self._ids):06d}"
        self.files[file_id] = (purpose, name, content)
        self.counts["files_uploaded"] += 1
        if self.config.lose_uploads:
            self.config.lose_uploads -= 1
            return None
        return json_response(200, file_object(file_id, purpose, name, content))

    def _create(self, raw: bytes) -> Response | None:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return json_response(400, error_body(400, "the body must be a JSON object"))
        if body.get("input_file_id") not in self.files:
            return json_response(400, error_body(400, f"no such file: {body.get('input_file_id')!r}"))
        if body.get("endpoint") not in _ENDPOINTS:
            return json_response(400, error_body(400, f"unsupported endpoint {body.get('endpoint')!r}"))
        if body.get("completion_window") != "24h":
            return json_response(400, error_body(400, "completion_window must be '24h'"))
        outcomes = self.config.outcomes
        outcome = outcomes.pop(0) if outcomes else "completed"
        batch = BatchState(
            f"batch_{next(self._ids):06d}",
            body["input_file_id"],
            body["endpoint"],
            time.time(),
            outcome,
            body.get("metadata") or {},
        )
        batch.counts["total"] = len(self._lines(batch))
        self.batches[batch.id] = batch
        self.counts["batches_created"] += 1
        if self.config.lose_creates:
            self.config.lose_creates -= 1
            return None
        return json_response(200, self._advance(batch))

    def _lines(self, batch: BatchState) -> list[bytes]:
        return [line for line in self.files[batch.input_file_id][2].splitlines() if line.strip()]

    def _custom_ids(self, batch: BatchState) -> list[str]:
        found = []
        for line in self._lines(batch):
            try:
                found.append(str(json.loads(line)["custom_id"]))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def _advance(self, batch: BatchState) -> dict[str, Any]:
        """Move the batch along its life-cycle by the clock, and return its Batch object."""
        if batch.finished_at is None:
            age = time.time() - batch.created_at
            if batch.cancel_requested:
                self._finish(batch, "cancelled")
            elif age >= self.config.completion_s:
                self._finish(batch, batch.outcome)
            else:
                batch.status = "validating" if age < self.config.validating_s else "in_progress"
        return batch_object(batch)

    def _finish(self, batch: BatchState, outcome: str) -> None:
        batch.finished_at = time.time()
        batch.status = outcome
        lines = self._lines(batch)
        if outcome == "failed" or len(lines) > _MAX_LINES:
            batch.status = "failed"
            message = (
                f"the file has {len(lines)} lines; at most {_MAX_LINES}"
                if len(lines) > _MAX_LINES
                else ("injected failure: validation failed")
            )
            batch.errors = {"object": "list", "data": [{"code": "invalid_file", "message": message, "line": None}]}
            return
        output: list[bytes] = []
        errors: list[bytes] = []
        for number, line in enumerate(lines, 1):
            target, entry = self._run_line(batch, number, line, outcome)
            target_list = output if target == "output" else errors
            target_list.append(json.dumps(entry, separators=(",", ":")).encode())
        batch.counts["completed"] = len(output)
        batch.counts["failed"] = len(errors)
        if output and self.config.duplicate_lines:
            output = self._duplicated(output)
        if output:
            batch.output_file_id = self._store_output(f"{batch.id}_output.jsonl", output)
        if errors:
            batch.error_file_id = self._store_output(f"{batch.id}_error.jsonl", errors)

    def _run_line(self, batch: BatchState, number: int, line: bytes, outcome: str) -> tuple[str, dict[str, Any]]:
        try:
            request = json.loads(line)
            custom_id = request["custom_id"]
        except (ValueError, KeyError, TypeError):
            return "error", error_line(None, None, "invalid_json_line", f"line {number} is not a request")
        if outcome in ("expired", "cancelled"):
            code = "batch_expired" if outcome == "expired" else "batch_cancelled"
            return "error", error_line(
                custom_id, None, code, f"this request could not be executed before the batch {outcome}"
            )
        url, body = request.get("url"), request.get("body")
        if request.get("method") != "POST" or url != batch.endpoint or not isinstance(body, dict):
            return "error", error_line(
                custom_id, None, "invalid_request", f"line {number}: POST to {batch.endpoint} expected"
            )
        status, reply = self._answer(_ENDPOINTS[batch.endpoint], body)
        self.counts["lines_answered"] += 1
        response = {"status_code": status, "request_id": f"req_{batch.id}_{number}", "body": reply}
        entry = {"id": f"batch_req_{batch.id}_{number}", "custom_id": custom_id, "response": response, "error": None}
        return ("output" if 200 <= status < 300 else "error"), entry

    @staticmethod
    def _duplicated(lines: list[bytes]) -> list[bytes]:
        """Each output line followed by another answer for its ``custom_id``, then a line for an id never sent."""
        doubled = []
        for line in lines:
            entry = json.loads(line)
            body = entry["response"]["body"]
            for choice in body.get("choices", []):
                if isinstance(choice.get("message"), dict):
                    choice["message"]["content"] = "a second, different answer"
                elif "text" in choice:
                    choice["text"] = "a second, different answer"
            doubled += [line, json.dumps(entry, separators=(",", ":")).encode()]
        if lines:
            stray = json.loads(lines[-1])
            stray["custom_id"] = "never-sent-0"
            doubled.append(json.dumps(stray, separators=(",", ":")).encode())
        return doubled

    def _store_output(self, name: str, lines: list[bytes]) -> str:
        file_id = f"file-{next(self._ids):06d}"
        self.files[file_id] = ("batch_output", name, b"\n".join(lines) + b"\n")
        return file_id
