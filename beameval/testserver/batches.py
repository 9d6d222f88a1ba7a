"""The Files and Batches endpoints of the stub server: OpenAI's Batch API, answered by the online reply logic.

``POST /v1/files`` (multipart ``purpose=batch`` + ``file``, read by aiohttp's multipart
parser), ``GET /v1/files`` (the most recent first, ``purpose``), ``GET /v1/files/{id}``,
``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``, ``POST /v1/batches``, ``GET
/v1/batches`` (the most recent first), ``GET /v1/batches/{id}``, ``POST
/v1/batches/{id}/cancel``; the same without ``/v1``: routes of the server's aiohttp.web
application (``add_routes``). Both listings page as OpenAI's do: ``limit`` (default 20, at
most 100) and ``after`` (the last id of the previous page), and say ``has_more``.
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

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from beameval.testserver.batch_objects import BatchState, batch_object, error_line, file_object
from beameval.testserver.replies import error_body
from beameval.testserver.wire import dropped, json_response

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
        """True for the paths this service answers (one under ``/files`` or ``/batches`` without a route: its 404)."""
        bare = path[3:] if path.startswith("/v1/") else path
        return bare.startswith(("/files", "/batches")) or path == "/_batches"

    def add_routes(self, router: web.UrlDispatcher) -> None:
        """Register the Files and Batches routes, with and without ``/v1``, and ``/_batches`` (any method)."""
        router.add_route("*", "/_batches", self._control)
        for prefix in ("/v1", ""):
            for method, path, handler in (
                ("GET", "/files", self._list_files),
                ("POST", "/files", self._upload),
                ("GET", "/files/{id}", self._file),
                ("DELETE", "/files/{id}", self._delete),
                ("GET", "/files/{id}/content", self._content),
                ("GET", "/batches", self._list_batches),
                ("POST", "/batches", self._create),
                ("GET", "/batches/{id}", self._poll),
                ("POST", "/batches/{id}/cancel", self._cancel),
            ):
                router.add_route(method, prefix + path, handler)

    @staticmethod
    def missing(request: web.BaseRequest) -> web.Response:
        """The 404 of an unknown file or batch, or of a Files or Batches path or method without a route."""
        return json_response(404, error_body(404, f"no such file or batch: {request.method} {request.path}"))

    async def _file(self, request: web.Request) -> web.Response:
        file_id = request.match_info["id"]
        if file_id not in self.files:
            return self.missing(request)
        return json_response(200, file_object(file_id, *self.files[file_id]))

    async def _delete(self, request: web.Request) -> web.Response:
        file_id = request.match_info["id"]
        if self.files.pop(file_id, None) is None:
            return self.missing(request)
        return json_response(200, {"id": file_id, "object": "file", "deleted": True})

    async def _content(self, request: web.Request) -> web.Response:
        file_id = request.match_info["id"]
        if file_id not in self.files:
            return self.missing(request)
        self.counts["downloads"] += 1
        return web.Response(body=self.files[file_id][2], content_type="application/jsonl")

    async def _poll(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return self.missing(request)
        self.counts["polls"] += 1
        return json_response(200, self._advance(batch))

    async def _cancel(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return self.missing(request)
        if batch.status not in ("completed", "failed", "expired", "cancelled"):
            batch.cancel_requested = True
            self.counts["cancels"] += 1
        return json_response(200, self._advance(batch))

    async def _list_files(self, request: web.Request) -> web.Response:
        return self._listing("files", request)

    async def _list_batches(self, request: web.Request) -> web.Response:
        return self._listing("batches", request)

    def _listing(self, kind: str, request: web.Request) -> web.Response:
        """One page of files or batches, the most recent first (OpenAI's ``limit``/``after``/``has_more``)."""
        self.counts["listings"] += 1
        if self.config.list_failures:
            self.config.list_failures -= 1
            return json_response(503, error_body(503, "injected fault: the listing is unavailable"))
        args = {name: value for name, value in request.query.items() if value}  # a blank value: as if absent
        try:
            limit = min(max(int(args.get("limit", "20")), 1), 100)
        except ValueError:
            return json_response(400, error_body(400, f"limit must be an integer, got {args['limit']!r}"))
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

    async def _control(self, request: web.Request) -> web.Response:
        if request.method == "POST":
            try:
                patch = json.loads(await request.read() or b"{}")
                if not isinstance(patch, dict):
                    raise ValueError("the body must be a JSON object")
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

    async def _upload(self, request: web.Request) -> web.Response:
        """Store the ``file`` of a ``multipart/form-data`` body, parsed by aiohttp's multipart reader."""
        try:
            form = await request.post() if request.content_type == "multipart/form-data" else None
        except ValueError:  # a body aiohttp's reader cannot frame (no boundary, no closing delimiter)
            form = None
        upload = form.get("file") if form is not None else None
        if form is None or not isinstance(upload, web.FileField):
            return json_response(400, error_body(400, "expected multipart/form-data with 'purpose' and 'file'"))
        purpose = form.get("purpose", "")
        if purpose != "batch":
            return json_response(400, error_body(400, f"purpose must be 'batch', got {purpose!r}"))
        content = upload.file.read()
        file_id = f"file-{next(self._ids):06d}"
        self.files[file_id] = (purpose, upload.filename, content)
        self.counts["files_uploaded"] += 1
        if self.config.lose_uploads:
            self.config.lose_uploads -= 1
            return dropped(request)
        return json_response(200, file_object(file_id, purpose, upload.filename, content))

    async def _create(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
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
            return dropped(request)
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
