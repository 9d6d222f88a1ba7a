"""Plan, submit, poll and collect one run's batches, resuming from the submission record.

``run_batches`` is the whole batch life of a run's requests:

1. Read the ledger. An uploaded file with no recorded batch (the process died between
   ``POST /files`` and recording ``POST /batches``' answer) is looked up in every page of
   the provider's batch listing by ``input_file_id`` and attached when found; a listing
   that fails stops the run with an error (rerun with ``--resume``), never "no batch".
2. Every request in a live batch waits for it; a request whose last batch failed,
   expired or was cancelled, or whose line failed with a retryable error, is sent again
   while it has submissions left (``1 + max_retries`` in all); a non-retryable line
   failure is final. Nothing else is ever submitted twice: a request is in at most one
   live batch, and one that a collected batch answered is answered from the journal.
3. What is left is split by ``max_requests`` and ``max_bytes``; each chunk is charged to
   the run's budget (``charge``; a chunk that would cross it is not submitted, and its
   requests are skipped), uploaded and submitted, each file and batch recorded before the
   next call.
4. Live batches are polled (1 s, doubling up to ``poll_interval``) until all have
   finished (``wait``) or ``max_wait`` passed; without ``wait`` they are polled once. A
   finished batch's output and error files are read, each answer recorded in the response
   journal under the request's key, the journal synced, and then the batch is marked
   finished in the ledger. Retryable failures go into a new batch at once. The first
   line of each of the batch's ids is used and billed; a second line for one id, or a
   line for an id the batch never held, is counted in ``ignored_lines``. A batch or file
   the provider no longer has (404) ends the batch without answers: its requests are
   retryable into a new batch, so ``--resume`` is never stuck on it.

A call sees only the live batches that ``owns`` accepts (its share of the requests, when
the stage spreads them over several keys); the others are another call's.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from beameval.config.batch import BatchSettings
from beameval.inference.batch.client import TERMINAL, BatchApiError, BatchClient
from beameval.inference.batch.ledger import BatchLedger, FinishedBatch, LedgerState, LineFailure, RequestId
from beameval.inference.batch.lines import (
    BatchRequest,
    iter_file_lines,
    parse_result_line,
    request_line,
    split_requests,
)

__all__ = ["BatchOutcome", "BatchRun", "run_batches"]

#: Checks an answer as online mode would (the handler's parse); returns why it is unusable, or None.
Validate = Callable[[Any], "LineFailure | None"]


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What became of one request.

    Attributes:
        body: the response body when it was answered.
        failure: why it failed for good.
        pending: its batch is still running (rerun with ``--resume``).
        skipped: never submitted, because its batch would have crossed the run's budget.
        submissions: how many batches it was put into.

    """

    body: Any = None
    failure: LineFailure | None = None
    pending: bool = False
    skipped: bool = False
    submissions: int = 0


@dataclass
class BatchRun:
    """Everything ``run_batches`` needs.

    Attributes:
        client: the endpoint's Files and Batches API.
        ledger: the run's submission record.
        settings: the endpoint's ``batch:`` block.
        endpoint: the batch ``endpoint`` and line ``url``.
        max_retries: resubmissions of a request after its first batch.
        validate: online mode's check of a 2xx body.
        record: keeps one answer in the response journal, ``record(key, body)``.
        sync: makes every recorded answer durable.
        metadata: put on every batch (the run's output, for a person looking at the provider's console).
        charge: holds a chunk's estimated cost in the run's budget before it is submitted and
            returns it as ``(tokens, usd)``, recorded with the upload; None when it would
            cross the budget (the chunk is not submitted). No ``charge``: no budget.
        collected: told what a batch held (as recorded with its upload) once it is collected.
        owns: whether a live batch (its requests) is this call's to poll and collect. None: every one.
        sleep: awaited between polls.
        clock: monotonic seconds.

    """

    client: BatchClient
    ledger: BatchLedger
    settings: BatchSettings
    endpoint: str
    max_retries: int
    validate: Validate
    record: Callable[[str, Any], None]
    sync: Callable[[], None]
    metadata: dict[str, str]
    charge: Callable[[Sequence[BatchRequest]], tuple[float, float] | None] | None = None
    collected: Callable[[tuple[float, float]], None] | None = None
    owns: Callable[[Sequence[RequestId]], bool] | None = None
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
    clock: Callable[[], float] = time.monotonic


async def run_batches(run: BatchRun, requests: Sequence[BatchRequest], collect: bool = True) -> dict[str, BatchOutcome]:
    """Bring ``requests`` as far as the settings allow; return an outcome per custom_id.

    Without ``collect`` it only submits what is not yet in a batch (and attaches lost
    creations), so every key of a stage can submit before any waits for its batches.
    """
    state = run.ledger.load()
    await _attach_orphans(run, state, {(r.custom_id, r.key) for r in requests})
    by_id = {(r.custom_id, r.key): r for r in requests}
    answers: dict[str, Any] = {}
    final: dict[str, LineFailure] = {}
    skipped: set[str] = set()
    to_submit = _plan(run, state, by_id, final)
    await _submit(run, state, to_submit, final, skipped)
    started = run.clock()
    pause = 1.0
    while collect and _mine(run, state):
        for batch_id in _mine(run, state):
            try:
                batch = await run.client.get(batch_id)
            except BatchApiError as exc:
                if exc.status != 404:
                    raise
                batch = {"status": "missing"}  # the provider no longer has it: its requests go into a new batch
            if batch.get("status") in TERMINAL or batch.get("status") == "missing":
                await _collect(run, state, batch_id, batch, by_id, answers)
        unanswered = {rid: by_id[rid] for rid in by_id if rid[0] not in answers and rid[0] not in skipped}
        await _submit(run, state, _plan(run, state, unanswered, final), final, skipped)
        if not _mine(run, state) or not run.settings.wait or run.clock() - started >= run.settings.max_wait:
            break
        await run.sleep(min(pause, run.settings.poll_interval))
        pause = min(pause * 2, run.settings.poll_interval)
    history = state.history()
    live = {rid for batch in state.live() for rid in state.requests_of(batch)}
    outcomes = {}
    for rid in by_id:
        count = len(history.get(rid, []))
        cid = rid[0]
        if cid in answers:
            outcomes[cid] = BatchOutcome(body=answers[cid], submissions=count)
        elif cid in skipped:
            outcomes[cid] = BatchOutcome(skipped=True, submissions=count)
        elif rid in live:
            outcomes[cid] = BatchOutcome(pending=True, submissions=count)
        else:
            failure = final.get(cid) or LineFailure(None, False, "no batch answered this request")
            outcomes[cid] = BatchOutcome(failure=failure, submissions=count)
    return outcomes


def _mine(run: BatchRun, state: LedgerState) -> list[str]:
    """The live batches this call polls and collects."""
    live = state.live()
    return live if run.owns is None else [batch for batch in live if run.owns(state.requests_of(batch))]


def _plan(
    run: BatchRun, state: LedgerState, wanted: dict[RequestId, BatchRequest], final: dict[str, LineFailure]
) -> list[BatchRequest]:
    """The requests to put into new batches; final failures go into ``final``."""
    history = state.history()
    live = {rid for batch in state.live() for rid in state.requests_of(batch)}
    submit = []
    for rid, request in wanted.items():
        if rid in live or rid[0] in final:
            continue
        batches = history.get(rid, [])
        if not batches:
            submit.append(request)
            continue
        last = state.finished[batches[-1]]
        failure = last.failed.get(rid[0])
        if failure is None and rid[0] not in last.ok:  # the batch ended without running it (failed, expired, ...)
            failure = LineFailure(None, True, f"batch {batches[-1]} ended {last.status} before answering it")
        if failure is None:  # answered, but the answer is not in the journal any more: ask again
            failure = LineFailure(None, True, "its recorded answer is missing")
        if not failure.retryable:
            final[rid[0]] = failure
        elif len(batches) > run.max_retries:
            final[rid[0]] = LineFailure(
                failure.status,
                False,
                f"{failure.error} (after {len(batches)} batch submissions; params.max_retries is {run.max_retries})",
            )
        else:
            submit.append(request)
    return submit


async def _submit(
    run: BatchRun,
    state: LedgerState,
    requests: list[BatchRequest],
    final: dict[str, LineFailure],
    skipped: set[str],
) -> None:
    """Upload and create batches for ``requests``, recording each file and batch as soon as it exists.

    A chunk the budget refuses is not submitted: its requests go into ``skipped``.
    """
    settings = run.settings
    chunks, too_large = split_requests(requests, run.endpoint, settings.max_requests, settings.max_bytes)
    for request in too_large:
        final[request.custom_id] = LineFailure(
            None, False, f"the request is larger than batch.max_bytes ({settings.max_bytes:,} bytes)"
        )
    for chunk in chunks:
        held = None if run.charge is None else run.charge(chunk)
        if run.charge is not None and held is None:
            skipped.update(request.custom_id for request in chunk)
            continue
        content = b"".join(request_line(request, run.endpoint) for request in chunk)
        # A unique name: how the file is found again when the upload's reply is lost.
        file_id = await run.client.upload(content, f"beameval-{chunk[0].custom_id}-{uuid.uuid4().hex}.jsonl")
        ids = [(request.custom_id, request.key) for request in chunk]
        run.ledger.uploaded(file_id, run.endpoint, ids, held)
        if held is not None:
            state.held[file_id] = held
        state.files[file_id] = ids
        batch = await run.client.create(file_id, run.endpoint, run.metadata)
        run.ledger.created(str(batch["id"]), file_id)  # first, before anything else can fail
        state.batches[str(batch["id"])] = file_id


async def _attach_orphans(run: BatchRun, state: LedgerState, wanted: set[RequestId]) -> None:
    """Find the batches of uploaded files whose creation was not recorded; forget files that have none."""
    orphans = [file_id for file_id in state.orphans() if wanted.intersection(state.files[file_id])]
    for file_id in orphans:
        batch = await run.client.find_batch(file_id)  # every page; a failed listing raises
        if batch is not None and "id" in batch:
            run.ledger.created(str(batch["id"]), file_id)
            state.batches[str(batch["id"])] = file_id
        else:  # never became a batch: its requests are sent again in a new file
            del state.files[file_id]


async def _collect(
    run: BatchRun,
    state: LedgerState,
    batch_id: str,
    batch: dict[str, Any],
    wanted: dict[RequestId, BatchRequest],
    answers: dict[str, Any],
) -> None:
    """Read a finished batch's files, journal its answers, then mark it finished in the ledger.

    The first line of each of the batch's ids counts; later lines for it, and lines for ids
    it never held, are ``ignored_lines``. A file the provider no longer has (404) is read as
    empty: the requests it answered end unanswered, and retryable.
    """
    keys = dict(state.requests_of(batch_id))
    done = FinishedBatch(str(batch.get("status")), set(), {})
    seen: set[str] = set()
    for file_field in ("output_file_id", "error_file_id"):
        file_id = batch.get(file_field)
        if not file_id:
            continue
        try:
            content = await run.client.content(str(file_id))
        except BatchApiError as exc:
            if exc.status != 404:
                raise
            content = b""
        for line in iter_file_lines(content):
            result = parse_result_line(line)
            if result is None or result.custom_id not in keys or result.custom_id in seen:
                done.ignored_lines += 1
                continue
            cid = result.custom_id
            seen.add(cid)
            if result.error is not None:
                done.failed[cid] = LineFailure(result.status, result.retryable, result.error)
                continue
            unusable = run.validate(result.body)
            if unusable is not None:
                done.failed[cid] = unusable
                continue
            run.record(keys[cid], result.body)
            done.ok.add(cid)
            prompt, completion = _tokens(result.body)
            done.prompt_tokens += prompt
            done.completion_tokens += completion
            if (cid, keys[cid]) in wanted:
                answers[cid] = result.body
    run.sync()  # every answer is durable before the ledger says the batch needs no collecting
    run.ledger.finished(batch_id, done)
    state.finished[batch_id] = done
    held = state.held.get(state.batches.get(batch_id, ""))
    if held is not None and run.collected is not None:
        run.collected(held)


def _tokens(body: Any) -> tuple[int, int]:
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else 0), (completion if isinstance(completion, int) else 0)
