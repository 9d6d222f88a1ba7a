"""Plan, submit, poll and collect one run's batches, resuming from the submission record.

``run_batches`` is the whole batch life of a run's requests:

1. Read the ledger. An uploaded file with no recorded batch (the process died between
   ``POST /files`` and recording ``POST /batches``' answer) is looked up among the
   provider's recent batches by ``input_file_id`` and attached when found.
2. Every request in a live batch waits for it; a request whose last batch failed,
   expired or was cancelled, or whose line failed with a retryable error, is sent again
   while it has submissions left (``1 + max_retries`` in all); a non-retryable line
   failure is final. Nothing else is ever submitted twice: a request is in at most one
   live batch, and one that a collected batch answered is answered from the journal.
3. What is left is split by ``max_requests`` and ``max_bytes``, uploaded and submitted,
   each file and batch recorded before the next call.
4. Live batches are polled (1 s, doubling up to ``poll_interval``) until all have
   finished (``wait``) or ``max_wait`` passed; without ``wait`` they are polled once. A
   finished batch's output and error files are read, each answer recorded in the response
   journal under the request's key, the journal synced, and then the batch is marked
   finished in the ledger. Retryable failures go into a new batch at once.
"""

from __future__ import annotations

import asyncio
import time
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
        submissions: how many batches it was put into.

    """

    body: Any = None
    failure: LineFailure | None = None
    pending: bool = False
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
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
    clock: Callable[[], float] = time.monotonic


async def run_batches(run: BatchRun, requests: Sequence[BatchRequest]) -> dict[str, BatchOutcome]:
    """Bring ``requests`` as far as the settings allow; return an outcome per custom_id."""
    state = run.ledger.load()
    await _attach_orphans(run, state, {(r.custom_id, r.key) for r in requests})
    by_id = {(r.custom_id, r.key): r for r in requests}
    answers: dict[str, Any] = {}
    final: dict[str, LineFailure] = {}
    to_submit = _plan(run, state, by_id, final)
    await _submit(run, state, to_submit, final)
    started = run.clock()
    pause = 1.0
    while state.live():
        for batch_id in list(state.live()):
            batch = await run.client.get(batch_id)
            if batch.get("status") in TERMINAL:
                await _collect(run, state, batch_id, batch, by_id, answers)
        again = _plan(run, state, {rid: by_id[rid] for rid in by_id if rid[0] not in answers}, final)
        await _submit(run, state, again, final)
        if not state.live() or not run.settings.wait or run.clock() - started >= run.settings.max_wait:
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
        elif rid in live:
            outcomes[cid] = BatchOutcome(pending=True, submissions=count)
        else:
            failure = final.get(cid) or LineFailure(None, False, "no batch answered this request")
            outcomes[cid] = BatchOutcome(failure=failure, submissions=count)
    return outcomes


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
    run: BatchRun, state: LedgerState, requests: list[BatchRequest], final: dict[str, LineFailure]
) -> None:
    """Upload and create batches for ``requests``, recording each file and batch as soon as it exists."""
    settings = run.settings
    chunks, too_large = split_requests(requests, run.endpoint, settings.max_requests, settings.max_bytes)
    for request in too_large:
        final[request.custom_id] = LineFailure(
            None, False, f"the request is larger than batch.max_bytes ({settings.max_bytes:,} bytes)"
        )
    for chunk in chunks:
        content = b"".join(request_line(request, run.endpoint) for request in chunk)
        file_id = await run.client.upload(content, f"beameval-{chunk[0].custom_id}.jsonl")
        ids = [(request.custom_id, request.key) for request in chunk]
        run.ledger.uploaded(file_id, run.endpoint, ids)
        state.files[file_id] = ids
        batch = await run.client.create(file_id, run.endpoint, run.metadata)
        run.ledger.created(str(batch["id"]), file_id)  # first, before anything else can fail
        state.batches[str(batch["id"])] = file_id


async def _attach_orphans(run: BatchRun, state: LedgerState, wanted: set[RequestId]) -> None:
    """Find the batches of uploaded files whose creation was not recorded; forget files that have none."""
    orphans = [file_id for file_id in state.orphans() if wanted.intersection(state.files[file_id])]
    if not orphans:
        return
    try:
        recent = await run.client.recent()
    except BatchApiError:
        recent = []
    by_file = {str(batch.get("input_file_id")): str(batch["id"]) for batch in recent if "id" in batch}
    for file_id in orphans:
        batch_id = by_file.get(file_id)
        if batch_id is not None:
            run.ledger.created(batch_id, file_id)
            state.batches[batch_id] = file_id
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
    """Read a finished batch's files, journal its answers, then mark it finished in the ledger."""
    keys = dict(state.requests_of(batch_id))
    done = FinishedBatch(str(batch.get("status")), set(), {})
    for file_field in ("output_file_id", "error_file_id"):
        file_id = batch.get(file_field)
        if not file_id:
            continue
        for line in iter_file_lines(await run.client.content(str(file_id))):
            result = parse_result_line(line)
            if result is None or result.custom_id not in keys:
                continue
            cid = result.custom_id
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


def _tokens(body: Any) -> tuple[int, int]:
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else 0), (completion if isinstance(completion, int) else 0)
