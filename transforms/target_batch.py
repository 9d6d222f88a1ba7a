"""Batch mode for a target: ``TargetBatch``, its ``BatchPlan``, and ``BatchSamples``, its ``BatchCalls`` stage.

A row's request is built as online mode builds it (``transforms.cache.target_request``) and
keyed as online mode keys it: a batch answer and an online answer are interchangeable in the
store. Rows already answered (store, journal) or with no request (unreadable, the prompt does
not render) travel under their shard's key too and pass on, so every row leaves the stage from
one step (a ``Flatten`` of two steps' outputs would make the local runner hold every emitted row
before scoring). An answer becomes its row by ``answered_row``, as a fresh online answer does;
the rows leave in ``PackedRows`` of up to ``OFFLINE_BATCH_ROWS``, which the checkpoint after
the stage holds compressed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from beameval.cache.key import response_key_from_content
from beameval.config.endpoints import ModelTarget
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.records import EndpointReply, GeneratedRow, InferenceInfo, InputRow, RowFailure
from beameval.core.redaction import Redactor
from beameval.inference.answers import answered_row
from beameval.inference.batch.ledger import TARGET_SCOPE
from beameval.inference.batch.lines import custom_id
from beameval.inference.batch.runner import BatchOutcome
from beameval.inference.budget import RunBudget
from beameval.inference.prepared import request_hash_from_bytes, wire_bytes
from beameval.inference.quota import EndpointQuota
from beameval.inference.targets import make_handler
from transforms.batch_calls import REQUESTS, BatchCalls, BatchPlan, Request, batch_answer
from transforms.batch_endpoint import PENDING, BatchEndpoint, shard_key
from transforms.cache import target_request
from transforms.row_batches import OFFLINE_BATCH_ROWS, PackedRows

__all__ = ["BatchSamples", "TargetBatch"]


class TargetBatch(BatchPlan):
    """A target's batch plan: a row's one request (its ``Request`` keeps item, raw line and notes), its GeneratedRow."""

    def __init__(self, config: EvalConfig, run_id: str) -> None:
        assert config.target is not None and config.target.model is not None
        self._target, self._params, self._run_id = config.target, config.params, run_id
        self._model: ModelTarget = config.target.model

    def endpoints(self) -> list[tuple[str, str, ModelTarget]]:
        return [(TARGET_SCOPE, TARGET_SCOPE, self._model)]

    def setup(self) -> None:
        self._handler = make_handler(self._target, self._params, None)  # builds requests only

    def batch_endpoints(self) -> dict[str, BatchEndpoint]:
        target, params = self._target, self._params
        handler = make_handler(target, params, target.api_key())
        spend = RunBudget.of(EndpointQuota.of(self._model, params, self._run_id))  # the job's ledger, if any
        redactor = Redactor(target.endpoint.secret_values())
        args = (params.max_retries, params.request_timeout, TARGET_SCOPE, redactor, spend)
        return {TARGET_SCOPE: BatchEndpoint(self._model, handler, *args)}

    def requests(self, row: InputRow | GeneratedRow) -> Iterator[tuple[str, Any, Any]]:
        yield REQUESTS, shard_key(TARGET_SCOPE, row.row_index, self._model), self._value(row)

    def _value(self, row: InputRow | GeneratedRow) -> tuple[str | None, Any]:
        """``(url, request)`` to send, or ``(None, row)`` for a row with nothing to send."""
        if isinstance(row, GeneratedRow):  # answered from the store or the journal
            return None, row
        if row.failure is not None or row.item is None:
            return None, GeneratedRow(row.row_index, row.item, {}, row.raw, row.failure, sample_index=row.sample_index)
        try:
            prepared = target_request(self._handler, row)
            content = wire_bytes(prepared)
        except (EvaluatorError, TypeError, ValueError) as exc:
            failure = RowFailure("sample_generation", [f"row {row.row_index}: {exc}"])
            return None, GeneratedRow(row.row_index, row.item, {}, row.raw, failure, sample_index=row.sample_index)
        key = response_key_from_content(
            prepared.url, content, row.sample_index, prepared.headers, self._handler.secrets
        )  # the key online mode uses: a batch answer and an online answer are interchangeable in the store
        # Each request as a plain tuple, the body once, no prompt (or cid, hash).
        return prepared.url, (row.row_index, row.sample_index, key, content, row.item, row.raw, row.notes)

    def custom_id(self, name: str, row_index: int, sample_index: int) -> str:
        return custom_id(row_index, sample_index)  # the target's ids are the rows' own

    def result(
        self, endpoint: BatchEndpoint, name: str, url: str, request: Request, outcome: BatchOutcome
    ) -> GeneratedRow:
        index, sample, _, body, item, raw, notes = request
        info = InferenceInfo(attempts=outcome.submissions, request_hash=request_hash_from_bytes(url, body))
        answer = batch_answer(endpoint, outcome, PENDING)
        if isinstance(answer, EndpointReply):
            info.http_status = answer.status
            sent = not (outcome.skipped or outcome.pending)
            message = f"row {index} {'failed inference: ' if sent else ''}{answer.error}"
            failure = RowFailure("sample_generation", [message], skipped=outcome.skipped, not_sent=outcome.pending)
            return GeneratedRow(index, item, {}, raw, failure, info, sample_index=sample)
        info.http_status = 200
        row = InputRow(index, item, raw, sample_index=sample, notes=notes, request=body.decode())
        answered = answered_row(row, answer, info)  # exactly what a fresh online answer goes through
        if answered.inference is not None:
            endpoint.record_usage(answered.inference.prompt_tokens, answered.inference.completion_tokens)
        return answered

    def emit(self, rows: Iterator[GeneratedRow]) -> Iterator[PackedRows]:
        while pack := PackedRows(itertools.islice(rows, OFFLINE_BATCH_ROWS)):
            yield pack


class BatchSamples(BatchCalls):
    """Rows (and store answers) -> ``PackedRows`` of ``GeneratedRow``s, the unanswered answered by the Batch API."""

    def __init__(self, config: EvalConfig, journal_dir: str, output: str, run_id: str = "") -> None:
        super().__init__(TargetBatch(config, run_id), journal_dir, output)
