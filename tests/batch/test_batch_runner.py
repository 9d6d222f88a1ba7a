"""The Beam-free batch library over real HTTP to the test server: splitting, line reading, and resuming a crash
that fell between ``POST /files`` and the record of ``POST /batches``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from beameval.config.batch import BatchSettings
from beameval.inference.batch.client import BatchApiError, BatchClient
from beameval.inference.batch.ledger import BatchLedger, FinishedBatch, metric_scope
from beameval.inference.batch.lines import BatchRequest, parse_result_line, request_line, split_requests
from beameval.inference.batch.runner import BatchRun, run_batches
from beameval.inference.http_client import HttpClient
from beameval.inference.prepared import canonical_json
from beameval.testserver.harness import ServerProcess

ENDPOINT = "/v1/chat/completions"


def requests(n: int) -> list[BatchRequest]:
    bodies = [{"model": "test-model", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(n)]
    return [BatchRequest(f"row-{i}-sample-0", f"{i:064x}", canonical_json(body)) for i, body in enumerate(bodies)]


def test_split_by_count_and_by_bytes() -> None:
    reqs = requests(10)
    line = len(request_line(reqs[0], ENDPOINT))  # q0..q9: every line has the same length
    assert json.loads(request_line(reqs[3], ENDPOINT)) == {
        "custom_id": "row-3-sample-0",
        "method": "POST",
        "url": ENDPOINT,
        "body": {"model": "test-model", "messages": [{"role": "user", "content": "q3"}]},
    }
    chunks, too_large = split_requests(reqs, ENDPOINT, 4, 10**6)
    assert [len(c) for c in chunks] == [4, 4, 2] and too_large == []
    chunks, _ = split_requests(reqs, ENDPOINT, 100, 3 * line + line // 2)
    assert [len(c) for c in chunks] == [3, 3, 3, 1]
    assert [r.custom_id for c in chunks for r in c] == [r.custom_id for r in reqs]  # order kept, none lost
    chunks, too_large = split_requests(reqs, ENDPOINT, 100, line - 1)
    assert chunks == [] and len(too_large) == 10


@pytest.mark.parametrize(
    ("line", "retryable", "says"),
    [
        ({"response": {"status_code": 400, "body": {"error": {"message": "bad"}}}, "error": None}, False, "HTTP 400"),
        ({"response": {"status_code": 429, "body": {}}, "error": None}, True, "HTTP 429"),
        ({"response": {"status_code": 503, "body": {}}, "error": None}, True, "HTTP 503"),
        ({"response": None, "error": {"code": "batch_expired", "message": "late"}}, True, "batch_expired"),
        ({"response": None, "error": {"code": "invalid_request", "message": "no"}}, False, "invalid_request"),
    ],
)
def test_failed_lines_are_classified_like_online_replies(line: dict[str, Any], retryable: bool, says: str) -> None:
    result = parse_result_line(json.dumps({"custom_id": "row-1-sample-0", **line}).encode())
    assert result is not None and result.body is None
    assert result.retryable is retryable and result.error is not None and says in result.error


def test_an_ok_line_and_unreadable_lines() -> None:
    ok = parse_result_line(b'{"custom_id": "c", "response": {"status_code": 200, "body": {"choices": []}}}')
    assert ok is not None and ok.error is None and ok.body == {"choices": []} and ok.status == 200
    assert parse_result_line(b"not json") is None
    assert parse_result_line(b'{"no_custom_id": 1}') is None


def make_run(server: ServerProcess, ledger: BatchLedger, recorded: dict[str, Any], http: HttpClient) -> BatchRun:
    client = BatchClient(http, server.base_url, "", {}, max_retries=0)
    return BatchRun(
        client=client,
        ledger=ledger,
        settings=BatchSettings(max_requests=5, poll_interval=0.05),
        endpoint=ENDPOINT,
        max_retries=1,
        validate=lambda body: None,
        record=recorded.__setitem__,
        sync=lambda: None,
        metadata={},
    )


async def crash_after_upload(
    server: ServerProcess, ledger: BatchLedger, reqs: list[BatchRequest], create: bool
) -> None:
    """What a run that died right after uploading (and, with ``create``, after creating) would leave behind."""
    http = HttpClient(2, 30.0)
    try:
        client = BatchClient(http, server.base_url, "", {}, max_retries=0)
        file_id = await client.upload(b"".join(request_line(r, ENDPOINT) for r in reqs), "crash.jsonl")
        ledger.uploaded(file_id, ENDPOINT, [(r.custom_id, r.key) for r in reqs])
        if create:
            await client.create(file_id, ENDPOINT, {})  # answered, but the process died before recording it
    finally:
        await http.aclose()


async def resume(server: ServerProcess, ledger: BatchLedger, reqs: list[BatchRequest]) -> dict[str, Any]:
    recorded: dict[str, Any] = {}
    http = HttpClient(2, 30.0)
    try:
        outcomes = await run_batches(make_run(server, ledger, recorded, http), reqs)
    finally:
        await http.aclose()
    assert all(o.body is not None for o in outcomes.values())
    assert set(recorded) == {r.key for r in reqs}  # every answer handed to the journal under its key
    return {cid: o.body["choices"][0]["message"]["content"] for cid, o in outcomes.items()}


@pytest.mark.parametrize("created", [True, False])
def test_a_crash_between_upload_and_record_is_attached_or_resent(created: bool, clean_server, tmp_path: Path) -> None:
    clean_server.batches(completion_s=0.0, validating_s=0.0, outcomes=[])
    ledger = BatchLedger(str(tmp_path / "batches"))
    reqs = requests(5)
    asyncio.run(crash_after_upload(clean_server, ledger, reqs, create=created))
    answers = asyncio.run(resume(clean_server, ledger, reqs))
    assert answers == {f"row-{i}-sample-0": f"q{i}" for i in range(5)}  # the test server echoes the prompt
    state = clean_server.batches()
    # Attached to the batch the provider had (found by its input file), or one new batch for the lost upload.
    assert state["batches_created"] == 1 and state["files_uploaded"] == (1 if created else 2)
    usage = ledger.load().usage()
    assert usage["batches"] == 1 and usage["requests"] == 5 and usage["resubmitted"] == 0 and usage["live"] == 0


def test_each_endpoint_reads_only_its_own_scope_of_the_record(tmp_path: Path) -> None:
    """The target and a judge share OUT_DIR/_responses/batches/; neither plans from, polls or counts the other's."""
    folder = str(tmp_path / "batches")
    target, judge = BatchLedger(folder), BatchLedger(folder, scope=metric_scope("llm-judge"))
    target.uploaded("file-1", ENDPOINT, [("row-0-sample-0", "a" * 64)])
    target.created("batch-1", "file-1")
    judge.uploaded("file-2", ENDPOINT, [("llm-judge-row-0-sample-0", "b" * 64), ("llm-judge-row-1-sample-0", "c" * 64)])
    judge.created("batch-2", "file-2")
    judge.finished("batch-2", FinishedBatch("completed", {"llm-judge-row-0-sample-0"}, {}, 7, 3))
    mine, theirs = target.load(), judge.load()
    assert (mine.batches, mine.live(), list(mine.files)) == ({"batch-1": "file-1"}, ["batch-1"], ["file-1"])
    assert (theirs.batches, theirs.live(), list(theirs.files)) == ({"batch-2": "file-2"}, [], ["file-2"])
    assert target.load().usage() == {
        "batches": 1,
        "requests": 1,
        "resubmitted": 0,
        "live": 1,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "ignored_lines": 0,
    }
    assert judge.load().usage() == {
        "batches": 1,
        "requests": 2,
        "resubmitted": 0,
        "live": 0,
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "ignored_lines": 0,
    }
    # A record written before scopes existed (no "scope" in its uploaded events) is the target's.
    old = json.dumps(
        {"event": "uploaded", "file_id": "file-0", "endpoint": ENDPOINT, "requests": [["row-1-sample-0", "d" * 64]]}
    )
    (tmp_path / "batches" / "00000000000000000001-0000-uploaded.json").write_text(old)
    assert list(target.load().files) == ["file-0", "file-1"] and "file-0" not in judge.load().files


def run_with(server: ServerProcess, ledger: BatchLedger, reqs: list[BatchRequest], retries: int) -> dict[str, Any]:
    """``run_batches`` over ``reqs`` with a client that retries ``retries`` times; the answers by custom_id."""

    async def go() -> dict[str, Any]:
        http = HttpClient(2, 30.0)
        try:
            run = make_run(server, ledger, {}, http)
            run.client = BatchClient(http, server.base_url, "", {}, max_retries=retries, sleep=no_sleep)
            outcomes = await run_batches(run, reqs)
        finally:
            await http.aclose()
        return {cid: o.body["choices"][0]["message"]["content"] for cid, o in outcomes.items() if o.body}

    return asyncio.run(go())


async def no_sleep(_seconds: float) -> None:
    return None


async def other_batches(server: ServerProcess, count: int) -> None:
    """``count`` batches created after the crash (another run's): the lost one is no longer among the newest 100."""
    http = HttpClient(2, 30.0)
    try:
        client = BatchClient(http, server.base_url, "", {}, max_retries=0)
        file_id = await client.upload(request_line(requests(1)[0], ENDPOINT), "other.jsonl")
        for _ in range(count):
            await client.create(file_id, ENDPOINT, {})
    finally:
        await http.aclose()


def test_a_lost_batch_behind_the_newest_100_is_found_on_a_later_page(clean_server, tmp_path: Path) -> None:
    clean_server.batches(completion_s=0.0, validating_s=0.0, outcomes=[])
    ledger = BatchLedger(str(tmp_path / "batches"))
    reqs = requests(5)
    asyncio.run(crash_after_upload(clean_server, ledger, reqs, create=True))
    asyncio.run(other_batches(clean_server, 150))
    answers = asyncio.run(resume(clean_server, ledger, reqs))
    assert answers == {f"row-{i}-sample-0": f"q{i}" for i in range(5)}
    state = clean_server.batches()
    assert state["batches_created"] == 151  # attached to the lost batch: nothing created again
    assert state["listings"] == 2  # two pages of 100 read
    assert ledger.load().usage()["batches"] == 1


def test_a_failed_listing_is_an_error_never_no_batch(clean_server, tmp_path: Path) -> None:
    clean_server.batches(completion_s=0.0, validating_s=0.0, outcomes=[], list_failures=10)
    ledger = BatchLedger(str(tmp_path / "batches"))
    reqs = requests(5)
    asyncio.run(crash_after_upload(clean_server, ledger, reqs, create=True))
    with pytest.raises(BatchApiError, match="listing batches: .*503"):
        run_with(clean_server, ledger, reqs, retries=2)
    assert clean_server.batches()["batches_created"] == 1  # nothing submitted on a listing that failed
    assert clean_server.batches()["listings"] == 3  # the listing was tried 1 + max_retries times
    assert ledger.load().orphans() != []  # the upload is still waiting to be found
    clean_server.batches(list_failures=0)
    assert run_with(clean_server, ledger, reqs, retries=2) == {f"row-{i}-sample-0": f"q{i}" for i in range(5)}
    assert clean_server.batches()["batches_created"] == 1


@pytest.mark.parametrize("lost", ["lose_creates", "lose_uploads"])
def test_a_creation_whose_reply_is_lost_is_looked_up_not_repeated(lost: str, clean_server, tmp_path: Path) -> None:
    clean_server.batches(completion_s=0.0, validating_s=0.0, outcomes=[], **{lost: 1})
    ledger = BatchLedger(str(tmp_path / "batches"))
    reqs = requests(5)
    assert run_with(clean_server, ledger, reqs, retries=2) == {f"row-{i}-sample-0": f"q{i}" for i in range(5)}
    state = clean_server.batches()
    assert (state["files_uploaded"], state["batches_created"]) == (1, 1)  # the lost one was found and used
    assert state["lines_answered"] == 5
    usage = ledger.load().usage()
    assert (usage["batches"], usage["requests"], usage["resubmitted"]) == (1, 5, 0)
