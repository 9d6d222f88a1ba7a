"""Batch mode's stage: every request still to answer goes, in one keyed step, through the provider's Batch API.

It stands where ``GenerateSamples`` stands, after the response store and journal lookup
(so a request already answered is never put into a batch) and before scoring:

* ``KeyBatchRequests`` builds each row's request exactly as online mode does
  (``transforms.cache.target_request``) and keys it as online mode keys it; rows already
  answered, and rows with no request (unreadable, prompt does not render), pass on as
  ``GeneratedRow``s, failed as online mode fails them;
* every request is grouped under one key, so one ``RunBatches`` call sees them all and
  can split them into the fewest batches; it submits, polls and collects
  (``beameval.inference.batch.runner``), records each answer in the response journal, and
  emits the rows, which go on to scoring like online answers.

A request whose batch is still running comes out as a failed, not-sent row; the
driver reads the submission record (``batch_usage``) and exits 75 instead of publishing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beameval.cache.key import response_key_from_content
from beameval.config.batch import BatchSettings
from beameval.config.schema import EvalConfig
from beameval.core.errors import ConfigError, EvaluatorError
from beameval.core.records import GeneratedRow, InferenceInfo, InputRow, RowFailure
from beameval.core.redaction import Redactor
from beameval.inference.answers import answered_row
from beameval.inference.batch.client import BatchApiError, BatchClient, batch_endpoint
from beameval.inference.batch.ledger import LEDGER_DIR, BatchLedger, LedgerState, LineFailure
from beameval.inference.batch.lines import BatchRequest, custom_id
from beameval.inference.batch.runner import BatchOutcome, BatchRun, run_batches
from beameval.inference.classify import classify
from beameval.inference.http_client import HttpClient
from beameval.inference.prepared import canonical_json, request_hash_from_bytes
from beameval.inference.targets import make_handler
from beameval.inference.targets.model_request import endpoint_urls
from transforms.cache import files_for, journal_for, target_request

__all__ = ["BatchSamples", "batch_usage", "uses_batch_mode"]

_PENDING = "not answered yet: its batch is still running at the provider (rerun with --resume to collect it)"
_REPLY_CAP = 1 << 31  # an output file holds every answer of a batch (up to 50,000)
_Request = tuple[str, str, str, bytes, InputRow]  # custom_id, key, request_hash, body, row


def ledger_dir(journal: str) -> str:
    """The submission record's folder inside the journal folder."""
    return FileSystems.join(journal, LEDGER_DIR)


def batch_usage(journal: str) -> dict[str, int]:
    """``usage.batch`` of results.json, from the submission record (every run of this OUT_DIR together)."""
    folder = ledger_dir(journal)
    state = BatchLedger(folder, files_for(folder)).load() if files_for(folder).match(f"{folder}/*.json") else None
    return (state or LedgerState()).usage()


def uses_batch_mode(config: EvalConfig) -> bool:
    """True when the target model is in ``mode: batch``; refuses a judge in batch mode, which is not supported yet.

    Raises:
        ConfigError: an ``llm-judge`` metric's model has ``mode: batch``.
    """
    for metric in config.metrics:
        model = getattr(metric, "model", None)
        if getattr(model, "mode", "online") == "batch":
            raise ConfigError(
                f"metric {metric.type!r}: mode: batch is supported on target.model only, not yet on a judge's model.",
                hint="Set the judge's mode to online (or remove it); the target can stay in batch mode.",
            )
    model = config.target.model if config.target is not None else None
    return model is not None and model.mode == "batch"


class KeyBatchRequests(beam.DoFn):
    """``InputRow | GeneratedRow`` -> answered or failed ``GeneratedRow``s, and ``(url, request)`` on ``requests``."""

    REQUESTS = "requests"

    def __init__(self, config: EvalConfig) -> None:
        self._config = config

    def setup(self) -> None:
        config = self._config
        assert config.target is not None
        self._handler = make_handler(config.target, config.params, None)  # builds requests only

    def process(self, row: InputRow | GeneratedRow) -> Iterator[Any]:
        if isinstance(row, GeneratedRow):  # answered from the store or the journal
            yield row
            return
        if row.failure is not None or row.item is None:
            yield GeneratedRow(row.row_index, row.item, {}, row.raw, row.failure, sample_index=row.sample_index)
            return
        try:
            prepared = target_request(self._handler, row)
            content = canonical_json(prepared.body)
        except (EvaluatorError, TypeError, ValueError) as exc:
            failure = RowFailure("sample_generation", [f"row {row.row_index}: {exc}"])
            yield GeneratedRow(row.row_index, row.item, {}, row.raw, failure, sample_index=row.sample_index)
            return
        key = response_key_from_content(
            prepared.url, content, row.sample_index, prepared.headers, self._handler.secrets
        )  # the key online mode uses: a batch answer and an online answer are interchangeable in the store
        digest = request_hash_from_bytes(prepared.url, content)
        # One group holds every request of the run: the row keeps the body, not the prompt it was built from.
        row = dataclasses.replace(row, request=content.decode("utf-8"), prompt=None)
        request = (custom_id(row.row_index, row.sample_index), key, digest, content, row)
        yield beam.pvalue.TaggedOutput(self.REQUESTS, (prepared.url, request))  # one group per endpoint URL


class RunBatches(beam.DoFn):
    """``(url, [requests])`` -> a ``GeneratedRow`` per request: answered, failed, or pending (its batch runs on)."""

    def __init__(self, config: EvalConfig, journal_dir: str, output: str) -> None:
        self._config = config
        self._journal_dir = journal_dir
        self._output = output

    def setup(self) -> None:
        config = self._config
        assert config.target is not None and config.target.model is not None
        self._model = config.target.model
        self._handler = make_handler(config.target, config.params, config.target.api_key())
        self._redactor = Redactor(config.target.endpoint.secret_values())

    def process(self, keyed: tuple[str, Any]) -> Iterator[GeneratedRow]:
        url, grouped = keyed
        requests: list[_Request] = sorted(grouped, key=lambda r: (r[4].row_index, r[4].sample_index))
        try:
            outcomes = asyncio.run(self._run(url, requests))
        except BatchApiError as exc:
            raise EvaluatorError(
                f"batch mode: {self._redactor.text(str(exc))}",
                hint="Every batch created so far is recorded in OUT_DIR/_responses/batches/; rerun with --resume "
                "to attach to them once the Batch API answers again.",
            ) from None
        for cid, _, digest, _, row in requests:
            yield self._row(row, digest, outcomes[cid])

    async def _run(self, url: str, requests: list[_Request]) -> dict[str, BatchOutcome]:
        settings: BatchSettings = self._model.batch
        params = self._config.params
        handler = self._handler
        timeout = max(params.request_timeout or 0.0, 300.0)  # an upload or download may be 200 MB
        http = HttpClient(4, timeout, ca_bundle=self._model.ca_bundle, max_response_bytes=_REPLY_CAP)
        base = endpoint_urls(self._model.url)[0]
        query = url.partition("?")[2]
        journal = journal_for(self._journal_dir)
        folder = ledger_dir(self._journal_dir)
        run = BatchRun(
            client=BatchClient(http, base, f"?{query}" if query else "", handler.headers, params.max_retries),
            ledger=BatchLedger(folder, files_for(folder)),
            settings=settings,
            endpoint=batch_endpoint(url, settings.endpoint),
            max_retries=params.max_retries,
            validate=self._validate,
            record=lambda key, body: journal.record(key, self._redactor.value(body), self._model.name),
            sync=journal.sync,
            metadata={"beameval_output": self._output[-512:]},
        )
        try:
            return await run_batches(run, [BatchRequest(cid, key, content) for cid, key, _, content, _ in requests])
        finally:
            await http.aclose()

    def _validate(self, body: Any) -> LineFailure | None:
        """Online mode's check of a 2xx reply (choices present, an answer in them)."""
        try:
            self._handler.parse(200, body)
        except Exception as exc:  # noqa: BLE001 - classified like an online reply that does not parse
            failure = classify(exc, secrets=self._handler.secrets)
            return LineFailure(200, failure.retryable, f"batch line: {failure.message}")
        return None

    def _row(self, row: InputRow, digest: str, outcome: BatchOutcome) -> GeneratedRow:
        info = InferenceInfo(attempts=outcome.submissions, request_hash=digest)
        if outcome.pending:
            failure = RowFailure("sample_generation", [f"row {row.row_index} {_PENDING}"], not_sent=True)
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
        return answered_row(row, sample, info)  # exactly what a fresh online answer goes through


class BatchSamples(beam.PTransform):
    """Rows (and store answers) -> ``GeneratedRow``s, the unanswered ones answered through the Batch API."""

    def __init__(self, config: EvalConfig, journal_dir: str, output: str) -> None:
        super().__init__()
        self._config = config
        self._journal_dir = journal_dir
        self._output = output

    def expand(self, rows: beam.PCollection[Any]) -> beam.PCollection[GeneratedRow]:
        keyed = rows | "KeyBatchRequests" >> beam.ParDo(KeyBatchRequests(self._config)).with_outputs(
            KeyBatchRequests.REQUESTS, main="done"
        )
        answered = (
            keyed[KeyBatchRequests.REQUESTS]
            | "AllRequests" >> beam.GroupByKey()
            | "RunBatches" >> beam.ParDo(RunBatches(self._config, self._journal_dir, self._output))
        )
        return (keyed.done, answered) | "Rows" >> beam.Flatten()
