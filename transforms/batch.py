"""Batch mode's stage: every request still to answer goes, in one keyed step, through the provider's Batch API.

It stands where ``GenerateSamples`` stands, after the response store and journal lookup
(so a request already answered is never put into a batch) and before scoring:

* ``KeyBatchRequests`` builds each row's request exactly as online mode does
  (``transforms.cache.target_request``) and keys it as online mode keys it; rows already
  answered, and rows with no request (unreadable, prompt does not render), pass on as
  ``GeneratedRow``s, failed as online mode fails them;
* every request is grouped under one key (the endpoint's scope), so one ``RunBatches``
  call sees them all and can split them into the fewest batches; one more element under
  that key (``collect_trigger``) makes the call happen even when the store and the journal
  answered every request, so a batch left live in the record (the run died after
  journaling its answers and before marking it finished) is still collected instead of
  keeping the run at exit 75. It submits, polls and collects
  (``beameval.inference.batch.runner``), records each answer in the response journal, and
  emits the rows, which go on to scoring like online answers.

A request whose batch is still running comes out as a failed, not-sent row; the
driver reads the submission record (``batch_usage``) and exits 75 instead of publishing.

``BatchEndpoint`` and ``send_batches`` are what any endpoint in batch mode shares: the
target here, an LLM judge in ``transforms.metric_batch`` (its own scope of the one
submission record, so the two never see each other's batches).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beameval.cache.key import response_key_from_content
from beameval.config.endpoints import ModelTarget
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.records import GeneratedRow, InferenceInfo, InputRow, RowFailure
from beameval.core.redaction import Redactor
from beameval.inference.answers import answered_row
from beameval.inference.batch.client import BatchApiError, BatchClient, batch_endpoint
from beameval.inference.batch.ledger import (
    LEDGER_DIR,
    TARGET_SCOPE,
    BatchLedger,
    LedgerState,
    LineFailure,
)
from beameval.inference.batch.lines import BatchRequest, custom_id
from beameval.inference.batch.runner import BatchOutcome, BatchRun, run_batches
from beameval.inference.classify import classify
from beameval.inference.http_client import HttpClient
from beameval.inference.prepared import canonical_json, request_hash_from_bytes
from beameval.inference.targets import make_handler
from beameval.inference.targets.base import TargetHandler
from beameval.inference.targets.model_request import endpoint_urls
from beameval.metrics.base import EndpointMetric, MetricConfig
from transforms.cache import files_for, journal_for, target_request
from transforms.metric_cache import endpoint_metrics

__all__ = [
    "PENDING",
    "BatchEndpoint",
    "BatchSamples",
    "batch_metrics",
    "batch_usage",
    "by_url",
    "collect_trigger",
    "in_batch_mode",
    "send_batches",
    "uses_batch_mode",
]

#: Why a request has no answer while its batch runs on at the provider.
PENDING = "not answered yet: its batch is still running at the provider (rerun with --resume to collect it)"
_REPLY_CAP = 1 << 31  # an output file holds every answer of a batch (up to 50,000)
_Request = tuple[str, str, str, bytes, InputRow]  # custom_id, key, request_hash, body, row


def ledger_dir(journal: str) -> str:
    """The submission record's folder inside the journal folder."""
    return FileSystems.join(journal, LEDGER_DIR)


def batch_usage(journal: str, scope: str = TARGET_SCOPE) -> dict[str, int]:
    """``usage.batch`` of one endpoint (``scope``), from the submission record (every run of this OUT_DIR together)."""
    folder = ledger_dir(journal)
    files = files_for(folder)
    state = BatchLedger(folder, files, scope).load() if files.match(f"{folder}/*.json") else None
    return (state or LedgerState()).usage()


def uses_batch_mode(config: EvalConfig) -> bool:
    """True when the target model is in ``mode: batch``."""
    model = config.target.model if config.target is not None else None
    return model is not None and model.mode == "batch"


def in_batch_mode(metric: EndpointMetric[Any]) -> bool:
    """True when an endpoint metric's model (an LLM judge's) is in ``mode: batch``."""
    access = metric.endpoint_access
    return isinstance(access, ModelTarget) and access.mode == "batch"


def batch_metrics(configs: Sequence[MetricConfig]) -> list[tuple[str, EndpointMetric[Any]]]:
    """The endpoint metrics in batch mode, with their metric keys (``CallMetricEndpoints`` leaves them alone)."""
    return [(key, metric) for key, metric in endpoint_metrics(configs) if in_batch_mode(metric)]


@dataclass(frozen=True)
class BatchEndpoint:
    """One endpoint of the run in batch mode, as its batches are sent, polled and collected.

    Attributes:
        model: its model config (URL, ``batch:`` settings, CA bundle).
        handler: builds its headers and parses its replies (the target's, or the judge's own).
        max_retries: resubmissions of a request after its first batch (and retries of one Batch API call).
        request_timeout: its per-attempt timeout (an upload or download gets at least 300 s).
        scope: its part of the submission record (``TARGET_SCOPE``, ``metric_scope(key)``).
        redactor: masks its key in what is recorded and in messages.

    """

    model: ModelTarget
    handler: TargetHandler
    max_retries: int
    request_timeout: float | None
    scope: str
    redactor: Redactor

    def validate(self, body: Any) -> LineFailure | None:
        """Online mode's check of a 2xx reply (the handler's parse: choices present, an answer in them)."""
        try:
            self.handler.parse(200, body)
        except Exception as exc:  # noqa: BLE001 - classified like an online reply that does not parse
            failure = classify(exc, secrets=self.handler.secrets)
            return LineFailure(200, failure.retryable, f"batch line: {failure.message}")
        return None


def collect_trigger(pipeline: beam.Pipeline, keys: Sequence[str], label: str) -> beam.PCollection[Any]:
    """``(key, None)`` per batch-mode endpoint: one element that makes its batch step run, requests or not."""
    return pipeline | label >> beam.Create([(key, None) for key in keys])


def by_url(grouped: Iterable[tuple[str, Any] | None], default_url: str) -> dict[str, list[Any]]:
    """An endpoint's grouped ``(url, request)``s by URL, without the trigger; ``{default_url: []}`` when there are none.

    The empty call still polls and collects the endpoint's live batches (nothing is submitted).
    """
    found: dict[str, list[Any]] = {}
    for item in grouped:
        if item is not None:
            found.setdefault(item[0], []).append(item[1])
    return found or {default_url: []}


def send_batches(
    endpoint: BatchEndpoint, url: str, requests: list[BatchRequest], journal_dir: str, output: str
) -> dict[str, BatchOutcome]:
    """Bring ``requests`` (all of one endpoint URL) through the Batch API; an outcome per custom_id.

    Raises:
        EvaluatorError: a Files or Batches call failed for good (every batch so far is recorded).
    """
    try:
        return asyncio.run(_run(endpoint, url, requests, journal_dir, output))
    except BatchApiError as exc:
        raise EvaluatorError(
            f"batch mode: {endpoint.redactor.text(str(exc))}",
            hint="Every batch created so far is recorded in OUT_DIR/_responses/batches/; rerun with --resume "
            "to attach to them once the Batch API answers again.",
        ) from None


async def _run(
    endpoint: BatchEndpoint, url: str, requests: list[BatchRequest], journal_dir: str, output: str
) -> dict[str, BatchOutcome]:
    model, settings = endpoint.model, endpoint.model.batch
    timeout = max(endpoint.request_timeout or 0.0, 300.0)  # an upload or download may be 200 MB
    http = HttpClient(4, timeout, ca_bundle=model.ca_bundle, max_response_bytes=_REPLY_CAP)
    query = url.partition("?")[2]
    journal = journal_for(journal_dir)
    folder = ledger_dir(journal_dir)
    headers = endpoint.handler.headers
    run = BatchRun(
        client=BatchClient(
            http, endpoint_urls(model.url)[0], f"?{query}" if query else "", headers, endpoint.max_retries
        ),
        ledger=BatchLedger(folder, files_for(folder), endpoint.scope),
        settings=settings,
        endpoint=batch_endpoint(url, settings.endpoint),
        max_retries=endpoint.max_retries,
        validate=endpoint.validate,
        record=lambda key, body: journal.record(key, endpoint.redactor.value(body), model.name),
        sync=journal.sync,
        metadata={"beameval_output": output[-512:], "beameval_endpoint": endpoint.scope},
    )
    try:
        return await run_batches(run, requests)
    finally:
        await http.aclose()


class KeyBatchRequests(beam.DoFn):
    """``InputRow | GeneratedRow`` -> answered or failed ``GeneratedRow``s, and ``(scope, (url, request))``s."""

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
        yield beam.pvalue.TaggedOutput(self.REQUESTS, (TARGET_SCOPE, (prepared.url, request)))  # one group


class RunBatches(beam.DoFn):
    """``(scope, [(url, request)])`` -> a ``GeneratedRow`` per request: answered, failed, or pending."""

    def __init__(self, config: EvalConfig, journal_dir: str, output: str) -> None:
        self._config = config
        self._journal_dir = journal_dir
        self._output = output

    def setup(self) -> None:
        config = self._config
        assert config.target is not None and config.target.model is not None
        self._handler = make_handler(config.target, config.params, config.target.api_key())
        self._redactor = Redactor(config.target.endpoint.secret_values())
        params = config.params
        self._endpoint = BatchEndpoint(
            config.target.model, self._handler, params.max_retries, params.request_timeout, TARGET_SCOPE, self._redactor
        )

    def process(self, keyed: tuple[str, Any]) -> Iterator[GeneratedRow]:
        _scope, grouped = keyed
        for url, found in by_url(grouped, self._endpoint.model.url).items():
            requests: list[_Request] = sorted(found, key=lambda r: (r[4].row_index, r[4].sample_index))
            batch = [BatchRequest(cid, key, content) for cid, key, _, content, _ in requests]
            outcomes = send_batches(self._endpoint, url, batch, self._journal_dir, self._output)
            for cid, _, digest, _, row in requests:
                yield self._row(row, digest, outcomes[cid])

    def _row(self, row: InputRow, digest: str, outcome: BatchOutcome) -> GeneratedRow:
        info = InferenceInfo(attempts=outcome.submissions, request_hash=digest)
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
        trigger = collect_trigger(rows.pipeline, [TARGET_SCOPE], "CollectTrigger")
        answered = (
            (keyed[KeyBatchRequests.REQUESTS], trigger)
            | "WithTrigger" >> beam.Flatten()
            | "AllRequests" >> beam.GroupByKey()
            | "RunBatches" >> beam.ParDo(RunBatches(self._config, self._journal_dir, self._output))
        )
        return (keyed.done, answered) | "Rows" >> beam.Flatten()
