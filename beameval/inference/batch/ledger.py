"""The submission record: every upload and batch of a run, written the moment the provider returns its id.

It lives in ``OUT_DIR/_responses/batches/``, one small JSON file per event, so a write is
all or nothing (a torn file is skipped) and a remote file system shows each event once
it is closed; locally each file is fsync'd, and its folder too, before the run does
anything else. File names sort in the order the events happened. Events:

* ``uploaded``: ``{file_id, endpoint, requests: [[custom_id, key], ...], held: [tokens, usd]}``,
  written after ``POST /files`` and before ``POST /batches``, so a crash between the two
  leaves a file whose batch can be found again (by its ``input_file_id``) rather than paid
  twice; ``held`` is the estimate the batch holds of the job's budget until it is collected
  (``live_holds``: what a ``--resume`` holds again for the batches it finds running);
* ``created``: ``{batch_id, file_id}``, right after ``POST /batches`` answered;
* ``finished``: ``{batch_id, status, ok: [custom_id...], failed: {custom_id: {status,
  retryable, error}}, prompt_tokens, completion_tokens, ignored_lines}``, after the batch's
  answers are in the response journal (and synced): a finished batch is never collected again.

Several endpoints of one run can be in batch mode (the target, and an LLM judge that
scores its answers later): each is a ``scope`` (``target``, ``metric:<key>``) of the one
record. Every event names its scope and its provider endpoint (``url`` and ``model``), and
a ledger reads only the events of its own scope and endpoint: file and batch ids are the
provider's, so two endpoints may issue the same ids, and they never mix. (Events written
before scopes existed have none: they are the target's; events without ``url`` match any.)

``LedgerState`` is what ``--resume`` plans from.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from beameval.cache.files import Files, LocalFiles, is_remote

__all__ = [
    "LEDGER_DIR",
    "TARGET_SCOPE",
    "BatchLedger",
    "live_holds",
    "FinishedBatch",
    "LedgerState",
    "LineFailure",
    "RequestId",
    "metric_scope",
]

#: The ledger's folder inside the journal folder (``OUT_DIR/_responses``): not a journal shard (``*.jsonl``).
LEDGER_DIR = "batches"

#: The scope of the target model's batches (and of events recorded without a scope).
TARGET_SCOPE = "target"

#: ``(custom_id, response key)``: the same row and sample with a changed request is another request.
RequestId = tuple[str, str]


def metric_scope(metric_key: str) -> str:
    """The scope of an endpoint metric's batches (an LLM judge's): ``metric:<key>``."""
    return f"metric:{metric_key}"


@dataclass(frozen=True, slots=True)
class LineFailure:
    """How one request of a finished batch failed."""

    status: int | None
    retryable: bool
    error: str


@dataclass(slots=True)
class FinishedBatch:
    """A batch whose answers have been collected.

    ``ignored_lines`` counts output lines that were not used: a second line for one
    ``custom_id`` (the first is kept) or a line for an id the batch never held.
    """

    status: str
    ok: set[str]
    failed: dict[str, LineFailure]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ignored_lines: int = 0


@dataclass(slots=True)
class LedgerState:
    """Every recorded upload and batch.

    Attributes:
        files: input file id -> its requests, in line order.
        endpoints: input file id -> the batch endpoint it was uploaded for.
        scopes: input file id -> the scope (endpoint of the run) it belongs to.
        batches: batch id -> its input file id, in creation order.
        finished: batch id -> how it ended (absent while it is live).
        held: input file id -> the ``(tokens, usd)`` its batch holds of the job's budget until collected.

    """

    files: dict[str, list[RequestId]] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)
    scopes: dict[str, str] = field(default_factory=dict)
    batches: dict[str, str] = field(default_factory=dict)
    finished: dict[str, FinishedBatch] = field(default_factory=dict)
    held: dict[str, tuple[float, float]] = field(default_factory=dict)

    def scoped(self, scope: str) -> LedgerState:
        """Only the files, batches and results of ``scope``."""
        files = {f: requests for f, requests in self.files.items() if self.scopes.get(f) == scope}
        batches = {b: f for b, f in self.batches.items() if f in files}
        return LedgerState(
            files,
            {f: e for f, e in self.endpoints.items() if f in files},
            {f: scope for f in files},
            batches,
            {b: done for b, done in self.finished.items() if b in batches},
            {f: held for f, held in self.held.items() if f in files},
        )

    def live(self) -> list[str]:
        """The batches created and not yet collected."""
        return [batch for batch in self.batches if batch not in self.finished]

    def held_live(self) -> list[tuple[float, float]]:
        """What each file not yet collected holds: a live batch's, or an orphan's (its batch may be running)."""
        collected = {self.batches[batch] for batch in self.finished if batch in self.batches}
        return [held for file_id, held in self.held.items() if file_id not in collected]

    def orphans(self) -> list[str]:
        """Input files uploaded whose batch was never recorded (the run died between the two calls)."""
        used = set(self.batches.values())
        return [file_id for file_id in self.files if file_id not in used]

    def requests_of(self, batch_id: str) -> list[RequestId]:
        return self.files.get(self.batches[batch_id], [])

    def history(self) -> dict[RequestId, list[str]]:
        """Request -> the batches it was put into, oldest first."""
        found: dict[RequestId, list[str]] = {}
        for batch in self.batches:
            for request in self.requests_of(batch):
                found.setdefault(request, []).append(batch)
        return found

    def usage(self) -> dict[str, int]:
        """``usage.batch`` of results.json: batches, distinct requests, resubmissions and the batch tokens."""
        submissions = sum(len(self.requests_of(batch)) for batch in self.batches)
        distinct = len(self.history())
        return {
            "batches": len(self.batches),
            "requests": distinct,
            "resubmitted": submissions - distinct,
            "live": len(self.live()),
            "prompt_tokens": sum(done.prompt_tokens for done in self.finished.values()),
            "completion_tokens": sum(done.completion_tokens for done in self.finished.values()),
            "ignored_lines": sum(done.ignored_lines for done in self.finished.values()),
        }


class BatchLedger:
    """Appends events to, and reads back, one run's submission record.

    Args:
        directory: ``OUT_DIR/_responses/batches``.
        files: the file system (``LocalFiles`` for a local path).
        scope: the endpoint whose batches this ledger writes and reads (``TARGET_SCOPE``,
            ``metric_scope(key)``).
        url: the provider endpoint's request URL, recorded with every id (None only to read
            every endpoint of the scope: ``scope_usage``).
        model: the model name sent to it, recorded beside the URL.
        part: the share of the scope's requests this ledger plans (a stage that spreads its
            requests over several keys names each key's part): its uploads are recorded
            with it, and ``load`` skips the uploads of other parts, so a key reads only its
            own files and batches. None reads every part.

    """

    def __init__(
        self,
        directory: str,
        files: Files | None = None,
        scope: str = TARGET_SCOPE,
        url: str | None = None,
        model: str | None = None,
        part: str | None = None,
    ) -> None:
        self.directory = directory
        self.scope = scope
        self.url = url
        self.model = model
        self.part = part
        self._files = files or LocalFiles()
        self._local = not is_remote(directory)

    def uploaded(
        self, file_id: str, endpoint: str, requests: Iterable[RequestId], held: tuple[float, float] | None = None
    ) -> None:
        listed = [list(r) for r in requests]
        event: dict[str, Any] = {"file_id": file_id, "endpoint": endpoint, "part": self.part, "requests": listed}
        if held is not None and (held[0] or held[1]):
            event["held"] = list(held)
        self._write("uploaded", event)

    def created(self, batch_id: str, file_id: str) -> None:
        self._write("created", {"batch_id": batch_id, "file_id": file_id})

    def finished(self, batch_id: str, done: FinishedBatch) -> None:
        failed = {
            cid: {"status": f.status, "retryable": f.retryable, "error": f.error} for cid, f in done.failed.items()
        }
        self._write(
            "finished",
            {
                "batch_id": batch_id,
                "status": done.status,
                "ok": sorted(done.ok),
                "failed": failed,
                "prompt_tokens": done.prompt_tokens,
                "completion_tokens": done.completion_tokens,
                "ignored_lines": done.ignored_lines,
            },
        )

    def load(self) -> LedgerState:
        """Every event of this ledger's scope and endpoint recorded so far; unreadable (torn) files are skipped."""
        groups = self._groups()
        state = LedgerState()
        for (url, model), events in groups.items():
            if self.url is None or url is None or (url, model) == (self.url, self.model):
                for event in events:
                    _apply(state, event)
        return state.scoped(self.scope)

    def scope_usage(self) -> dict[str, int]:
        """``LedgerState.usage`` of every endpoint of this scope, summed (each endpoint's ids read apart)."""
        total: dict[str, int] = {}
        for events in self._groups().values():
            state = LedgerState()
            for event in events:
                _apply(state, event)
            for name, value in state.scoped(self.scope).usage().items():
                total[name] = total.get(name, 0) + value
        return total or LedgerState().usage()

    def _groups(self) -> dict[tuple[str | None, str | None], list[dict[str, Any]]]:
        """This scope's events by provider endpoint ``(url, model)``, in the order they happened."""
        groups: dict[tuple[str | None, str | None], list[dict[str, Any]]] = {}
        for event in _events(self.directory, self._files):
            # Before ids were recorded with their endpoint, only uploads named a scope: an old batch
            # event joins any scope, which keeps it only when it has one of that scope's files.
            legacy = "url" not in event and event.get("event") != "uploaded"
            other_part = self.part is not None and event.get("part") not in (None, self.part)
            if other_part and event.get("event") == "uploaded":
                continue  # another key's file (its batch events are dropped with it by ``scoped``)
            if legacy or event.get("scope", TARGET_SCOPE) == self.scope:
                groups.setdefault((event.get("url"), event.get("model")), []).append(event)
        return groups

    def _write(self, kind: str, data: dict[str, Any]) -> None:
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}-{kind}.json"
        path = self._files.join(self.directory, name)
        where = {"scope": self.scope, "url": self.url, "model": self.model}
        text = json.dumps({"event": kind, "at": round(time.time(), 3), **where, **data}, separators=(",", ":"))
        payload = text.encode()
        if not self._local:
            with self._files.create(path) as handle:  # visible, whole, once closed
                handle.write(payload)
            return
        os.makedirs(self.directory, exist_ok=True)
        partial = f"{path}.partial"
        with open(partial, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)  # all or nothing: a kill -9 leaves the event whole or absent
        folder = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(folder)  # the new name survives a power cut too
        finally:
            os.close(folder)


def _events(directory: str, files: Files) -> Iterator[dict[str, Any]]:
    """Every event in ``directory``, in the order they happened; unreadable (torn) files are skipped."""
    for path in files.match(files.join(directory, "*.json")):
        try:
            with files.open(path) as handle:
                event = json.loads(handle.read())
        except (OSError, ValueError):
            continue
        if isinstance(event, dict):
            yield event


def live_holds(directory: str, files: Files | None = None) -> tuple[float, float]:
    """What the batches of the record not yet collected hold of the job's budget, every scope and endpoint together.

    A batch holds its estimate from its submission until its answers are collected, in
    whatever invocation that happens: a ``--resume`` holds this again before it sends or
    submits anything, so nothing it adds can take the job past its budget once they finish.
    """
    states: dict[tuple[Any, Any, Any], LedgerState] = {}
    for event in _events(directory, files or LocalFiles()):
        where = (event.get("scope", TARGET_SCOPE), event.get("url"), event.get("model"))
        _apply(states.setdefault(where, LedgerState()), event)
    holds = [held for state in states.values() for held in state.held_live()]
    return sum(tokens for tokens, _usd in holds), sum(usd for _tokens, usd in holds)


def _apply(state: LedgerState, event: Any) -> None:
    if not isinstance(event, dict):
        return
    kind = event.get("event")
    if kind == "uploaded":
        state.files[event["file_id"]] = [(str(c), str(k)) for c, k in event["requests"]]
        state.endpoints[event["file_id"]] = str(event.get("endpoint", ""))
        state.scopes[event["file_id"]] = str(event.get("scope", TARGET_SCOPE))
        held = event.get("held")
        if isinstance(held, list) and len(held) == 2 and all(isinstance(v, (int, float)) for v in held):
            state.held[event["file_id"]] = (float(held[0]), float(held[1]))
    elif kind == "created":
        state.batches[event["batch_id"]] = event["file_id"]
    elif kind == "finished":
        failed = {
            cid: LineFailure(f.get("status"), bool(f.get("retryable")), str(f.get("error")))
            for cid, f in event.get("failed", {}).items()
        }
        state.finished[event["batch_id"]] = FinishedBatch(
            str(event["status"]),
            set(event.get("ok", [])),
            failed,
            int(event.get("prompt_tokens", 0)),
            int(event.get("completion_tokens", 0)),
            int(event.get("ignored_lines", 0)),
        )
