"""Batch mode's stage: every request still to answer goes, in one keyed step, through the provider's Batch API.

It stands where ``GenerateSamples`` stands, after the response store and journal lookup
(so a request already answered is never put into a batch) and before scoring:

* ``KeyBatchRequests`` builds each row's request exactly as online mode does
  (``transforms.cache.target_request``) and keys it as online mode keys it; rows already
  answered, and rows with no request (unreadable, prompt does not render), pass on as
  ``GeneratedRow``s, failed as online mode fails them;
* the requests are spread over many keys, ``(scope, shard)`` with ``shard`` the row index
  divided by ``batch.max_requests`` (``shard_key``), so one key holds about one full batch
  and no worker has to hold every request; a key's requests go into their own batches.
  ``collect_trigger`` adds one element under shard 0 and under the shard of every batch
  left live in the record, so a key's call happens even when the store and the journal
  answered every request (the run died after journaling a batch's answers and before
  marking it finished), and the batch is collected instead of keeping the run at exit 75;
* the grouped requests are read twice (``submit_then_collect``): first every key submits
  what it still needs (``collect=False``), then, once every key has submitted (a side
  input makes the second step wait for the first), each key polls and collects its own
  batches (``beameval.inference.batch.runner``), records each answer in the response
  journal and emits the rows, which go on to scoring like online answers. So the
  provider runs every key's batches at once, whatever order the keys are waited on in.

Batch requests are charged to the run's budget (``params.budget``) before their batch is
submitted (``BatchEndpoint.charge``): a batch that would cross it is not submitted, and its rows
are ``skipped``.

A request whose batch is still running comes out as a failed, not-sent row; the
driver reads the submission record (``batch_usage``) and exits 75 instead of publishing.

``BatchEndpoint`` and ``send_batches`` are what any endpoint in batch mode shares: the
target here, an LLM judge in ``transforms.metric_batch`` (its own scope of the one
submission record, so the two never see each other's batches).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.utils.windowed_value import WindowedValue

from beameval.cache.key import response_key_from_content
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.records import GeneratedRow, InferenceInfo, InputRow, RowFailure
from beameval.core.redaction import Redactor
from beameval.inference.answers import answered_row
from beameval.inference.batch.ledger import (
    TARGET_SCOPE,
)
from beameval.inference.batch.lines import BatchRequest, custom_id
from beameval.inference.batch.runner import BatchOutcome
from beameval.inference.budget import RunBudget
from beameval.inference.classify import classify
from beameval.inference.prepared import canonical_json, request_hash_from_bytes
from beameval.inference.quota import EndpointQuota
from beameval.inference.targets import make_handler
from transforms.async_calls import in_global_window
from transforms.batch_endpoint import (
    PACK_ROWS,
    PENDING,
    BatchEndpoint,
    by_url,
    collect_trigger,
    send_batches,
    shard_key,
    submit_then_collect,
)
from transforms.cache import target_request
from transforms.row_batches import OFFLINE_BATCH_ROWS, PackedRows

__all__ = ["BatchSamples"]


#: One target request in a group, as compact as it travels: row index, sample index, response key, the row's
#: item, raw line and notes, and the request body (the InputRow is rebuilt from them after the group).
_Request = tuple[int, int, str, Any, "str | None", list[str], str]


class KeyBatchRequests(beam.DoFn):
    """``InputRow | GeneratedRow`` -> ``((scope, shard), PackedRows of (url, request))``; ``(None, row)`` to pass on.

    Rows already answered (or failed) travel under their shard's key too, so every row of
    the stage leaves it from one step (``RunBatches``): a ``Flatten`` of two steps' outputs
    would make the local runner hold every emitted row before scoring. A bundle's values of
    one key go as one compressed ``PackedRows`` (up to ``PACK_ROWS``): the local runner
    holds a ``GroupByKey``'s whole input, and packed it is a fraction of the requests' size.
    """

    def __init__(self, config: EvalConfig) -> None:
        self._config = config

    def setup(self) -> None:
        config = self._config
        assert config.target is not None and config.target.model is not None
        self._handler = make_handler(config.target, config.params, None)  # builds requests only
        self._model = config.target.model

    def start_bundle(self) -> None:
        self._packs: dict[tuple[str, int], PackedRows] = {}

    def process(self, row: InputRow | GeneratedRow) -> Iterator[tuple[tuple[str, int], PackedRows]]:
        key = shard_key(TARGET_SCOPE, row.row_index, self._model)
        pack = self._packs.setdefault(key, PackedRows())
        pack.append(self._value(row))
        if len(pack) >= PACK_ROWS:
            yield key, self._packs.pop(key)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for key, pack in self._packs.items():
            yield in_global_window((key, pack))

    def _value(self, row: InputRow | GeneratedRow) -> tuple[str | None, Any]:
        """``(url, request)`` to send, or ``(None, row)`` for a row with nothing to send."""
        if isinstance(row, GeneratedRow):  # answered from the store or the journal
            return None, row
        if row.failure is not None or row.item is None:
            return None, GeneratedRow(row.row_index, row.item, {}, row.raw, row.failure, sample_index=row.sample_index)
        try:
            prepared = target_request(self._handler, row)
            content = canonical_json(prepared.body)
        except (EvaluatorError, TypeError, ValueError) as exc:
            failure = RowFailure("sample_generation", [f"row {row.row_index}: {exc}"])
            return None, GeneratedRow(row.row_index, row.item, {}, row.raw, failure, sample_index=row.sample_index)
        key = response_key_from_content(
            prepared.url, content, row.sample_index, prepared.headers, self._handler.secrets
        )  # the key online mode uses: a batch answer and an online answer are interchangeable in the store
        # Each request as a plain tuple, the body once, no prompt (or cid, hash).
        return prepared.url, (row.row_index, row.sample_index, key, row.item, row.raw, row.notes, content.decode())


def _passed_on(grouped: Iterable[PackedRows | None], through: list[GeneratedRow]) -> Iterator[Any]:
    """The group's requests (and trigger), unpacked; its rows with nothing to send go into ``through``."""
    for pack in grouped:
        if pack is None:  # the collect trigger
            yield None
            continue
        for item in pack:
            if item[0] is None:
                through.append(item[1])
            else:
                yield item


class RunBatches(beam.DoFn):
    """``((scope, shard), [(url, request)])`` -> a ``GeneratedRow`` per request: answered, failed, pending or skipped.

    Without ``collect`` it only submits, and emits nothing (``submit_then_collect``). The rows
    come out in ``PackedRows`` of up to ``OFFLINE_BATCH_ROWS``: what the checkpoint after this
    stage holds is compressed (on the local runner, all of it).
    """

    def __init__(self, config: EvalConfig, journal_dir: str, output: str, run_id: str, collect: bool) -> None:
        self._config = config
        self._journal_dir = journal_dir
        self._output = output
        self._run_id = run_id
        self._collect = collect

    def setup(self) -> None:
        config = self._config
        assert config.target is not None and config.target.model is not None
        self._handler = make_handler(config.target, config.params, config.target.api_key())
        self._redactor = Redactor(config.target.endpoint.secret_values())
        params, model = config.params, config.target.model
        self._endpoint = BatchEndpoint(
            model,
            self._handler,
            params.max_retries,
            params.request_timeout,
            TARGET_SCOPE,
            self._redactor,
            RunBudget.of(EndpointQuota.of(model, params, self._run_id)),  # the job's ledger, if any
        )

    def process(self, keyed: tuple[tuple[str, int], Any], _submitted: Any = None) -> Iterator[PackedRows]:
        rows = self._rows(keyed)
        while pack := PackedRows(itertools.islice(rows, OFFLINE_BATCH_ROWS)):
            yield pack

    def _rows(self, keyed: tuple[tuple[str, int], Any]) -> Iterator[GeneratedRow]:
        """The key's rows: passed on, or answered through its batches (none without ``collect``)."""
        (_scope, shard), grouped = keyed
        through: list[GeneratedRow] = []
        requests_by_url = by_url(_passed_on(grouped, through), self._endpoint.model.url)
        if self._collect:
            yield from through
        for url, found in requests_by_url.items():
            requests: list[_Request] = sorted(found, key=lambda r: (r[0], r[1]))
            batch = [BatchRequest(custom_id(r[0], r[1]), r[2], r[6].encode()) for r in requests]
            outcomes = send_batches(self._endpoint, url, batch, self._journal_dir, self._output, shard, self._collect)
            if not self._collect:
                continue
            for index, sample, _, item, raw, notes, body in requests:
                row = InputRow(index, item, raw, sample_index=sample, notes=notes, request=body)
                digest = request_hash_from_bytes(url, body.encode())
                yield self._row(row, digest, outcomes[custom_id(index, sample)])

    def _row(self, row: InputRow, digest: str, outcome: BatchOutcome) -> GeneratedRow:
        info = InferenceInfo(attempts=outcome.submissions, request_hash=digest)
        if outcome.skipped:
            message = f"row {row.row_index} not sent: its batch would have passed the run's budget (params.budget)"
            failure = RowFailure("sample_generation", [message], skipped=True)
            return GeneratedRow(row.row_index, row.item, {}, row.raw, failure, info, sample_index=row.sample_index)
        if outcome.pending:
            failure = RowFailure("sample_generation", [f"row {row.row_index} {PENDING}"], not_sent=True)
            return GeneratedRow(row.row_index, row.item, {}, row.raw, failure, info, sample_index=row.sample_index)
        if outcome.failure is not None:
            info.http_status = outcome.failure.status
            message = self._redactor.text(f"row {row.row_index} failed inference: {outcome.failure.error}")
            failure = RowFailure("sample_generation", [message])
            return GeneratedRow(row.row_index, row.item, {}, row.raw, failure, info, sample_index=row.sample_index)
        info.http_status = 200
        try:
            sample = self._handler.parse(200, outcome.body)
        except Exception as exc:  # noqa: BLE001 - a reply that does not parse fails its row, as online
            message = self._redactor.text(f"row {row.row_index} failed inference: {classify(exc).message}")
            return GeneratedRow(
                row.row_index,
                row.item,
                {},
                row.raw,
                RowFailure("sample_generation", [message]),
                info,
                sample_index=row.sample_index,
            )
        answered = answered_row(row, sample, info)  # exactly what a fresh online answer goes through
        if answered.inference is not None:
            self._endpoint.record_usage(answered.inference.prompt_tokens, answered.inference.completion_tokens)
        return answered


class BatchSamples(beam.PTransform):
    """Rows (and store answers) -> ``PackedRows`` of ``GeneratedRow``s, the unanswered answered by the Batch API."""

    def __init__(self, config: EvalConfig, journal_dir: str, output: str, run_id: str = ""):
        super().__init__()
        self._config = config
        self._journal_dir = journal_dir
        self._output = output
        self._run_id = run_id

    def expand(self, rows: beam.PCollection[Any]) -> beam.PCollection[PackedRows]:
        keyed = rows | "KeyBatchRequests" >> beam.ParDo(KeyBatchRequests(self._config))
        assert self._config.target is not None and self._config.target.model is not None
        endpoints = [(TARGET_SCOPE, TARGET_SCOPE, self._config.target.model)]
        trigger = collect_trigger(rows.pipeline, endpoints, self._journal_dir, "CollectTrigger")
        grouped = (keyed, trigger) | "WithTrigger" >> beam.Flatten() | "RequestsByShard" >> beam.GroupByKey()
        config, journal, output, run_id = self._config, self._journal_dir, self._output, self._run_id
        return submit_then_collect(
            grouped, lambda collect: RunBatches(config, journal, output, run_id, collect), "Batches"
        )
