"""One endpoint in batch mode: its records, its budget, and sending, polling and collecting its batches.

Which endpoints are in batch mode, where their submission records live, what a batch is
charged against the budget before it is submitted, and the send/poll/collect/cancel steps.

Used by batch mode's one stage (``transforms.batch_calls``, with the target's plan in
``transforms.target_batch`` and the judges' in ``transforms.metric_batch``); ``live_batches``
is what ``--overwrite`` asks before it would abandon batches the provider still runs.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beameval.config.endpoints import ModelTarget
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.redaction import Redactor
from beameval.inference.batch.client import TERMINAL, BatchApiError, BatchClient, batch_endpoint
from beameval.inference.batch.ledger import (
    LEDGER_DIR,
    TARGET_SCOPE,
    BatchLedger,
    LedgerState,
    LineFailure,
    metric_scope,
)
from beameval.inference.batch.lines import BatchRequest
from beameval.inference.batch.runner import BatchOutcome, BatchRun, run_batches
from beameval.inference.budget import RunBudget
from beameval.inference.classify import classify
from beameval.inference.estimate import estimate_tokens
from beameval.inference.http_client import HttpClient
from beameval.inference.targets import make_handler
from beameval.inference.targets.base import TargetHandler
from beameval.inference.targets.model_request import endpoint_urls
from beameval.metrics.base import EndpointMetric, MetricConfig
from transforms.cache import files_for, journal_for
from transforms.metric_cache import endpoint_metrics

__all__ = [
    "PACK_ROWS",
    "PENDING",
    "BatchEndpoint",
    "batch_metrics",
    "batch_usage",
    "by_url",
    "collect_trigger",
    "in_batch_mode",
    "ledger_dir",
    "live_batches",
    "send_batches",
    "shard_key",
    "submit_then_collect",
    "uses_batch_mode",
]

#: Values per ``PackedRows`` a bundle emits for one key of a batch stage's ``GroupByKey``.
PACK_ROWS = 1000
#: Why a request has no answer while its batch runs on at the provider.
PENDING = "not answered yet: its batch is still running at the provider (rerun with --resume to collect it)"

_REPLY_CAP = 1 << 31  # an output file holds every answer of a batch (up to 50,000)
_ROW_OF_ID = re.compile(r"row-(\d+)-sample-\d+$")


def ledger_dir(journal: str) -> str:
    """The submission record's folder inside the journal folder."""
    return FileSystems.join(journal, LEDGER_DIR)


def batch_usage(journal: str, scope: str = TARGET_SCOPE) -> dict[str, int]:
    """``usage.batch`` of one endpoint (``scope``), from the submission record (every run of this OUT_DIR together)."""
    folder = ledger_dir(journal)
    files = files_for(folder)
    return BatchLedger(folder, files, scope).scope_usage() if files.match(f"{folder}/*.json") else LedgerState().usage()


def shard_key(scope: str, row_index: int, model: ModelTarget) -> tuple[str, int]:
    """The key a request is grouped under: its endpoint's scope and its row's shard (about one batch of rows)."""
    return scope, row_index // model.batch.max_requests


def _shard_of(requests: Sequence[tuple[str, str]], model: ModelTarget) -> int | None:
    """The shard of a recorded batch: its first request's row (None for an id this stage did not make)."""
    found = _ROW_OF_ID.search(requests[0][0]) if requests else None
    return None if found is None else int(found.group(1)) // model.batch.max_requests


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
        spend: the job's budget and ledger (``RunBudget.of`` the endpoint's quota): ``charge``
            holds each batch's estimate in it, ``record_usage`` puts what each answer used;
            None without a budget or a ledger.

    """

    model: ModelTarget
    handler: TargetHandler
    max_retries: int
    request_timeout: float | None
    scope: str
    redactor: Redactor
    spend: RunBudget | None = None
    #: Since ``settle_collected``, ``[tokens, usd]``: what the collected batches held, and what their answers used.
    _held: list[float] = field(default_factory=lambda: [0.0, 0.0], compare=False, repr=False)
    _used: list[float] = field(default_factory=lambda: [0.0, 0.0], compare=False, repr=False)

    def charge(self, chunk: Sequence[BatchRequest]) -> tuple[float, float] | None:
        """Hold a batch's estimated cost (batch-priced) in the job's budget before it is submitted; None: no room.

        The whole estimate (prompt estimate + ``max_tokens`` per request) is held in the
        job's budget, the one every online request of every endpoint reserves from
        (``RunBudget.hold``; with the job's ledger, in what all worker processes share),
        when the batch is submitted: the answers arrive in one piece, possibly in another
        process or a later invocation. Returns the ``(tokens, usd)`` held, recorded with
        the batch's upload: whoever collects the batch settles its hold (``collected``),
        and a ``--resume`` that finds it running holds it again. ``(0, 0)`` without a budget.
        """
        budget = self.spend
        if budget is None or (budget.max_tokens is None and budget.max_usd is None):
            return 0.0, 0.0
        pricing = self.model.pricing
        tokens = usd = 0.0
        for request in chunk:
            prompt, completion = estimate_tokens(json.loads(request.content), len(request.content))
            tokens += prompt + completion
            usd += 0.0 if pricing is None else pricing.cost(prompt, completion, batch=True)
        return (tokens, usd) if budget.hold(tokens, usd) else None

    def record_usage(self, prompt: int | None, completion: int | None) -> None:
        """Record what one answer used (its tokens, batch-priced) in the job's ledger, when it is collected.

        The charge before submission is a check on the estimate; the job's spend, its budget
        across invocations and ``usage.budget``, is what the answers used.
        """
        if self.spend is None:
            return
        prompt, completion = prompt or 0, completion or 0
        pricing = self.model.pricing
        usd = 0.0 if pricing is None else pricing.cost(prompt, completion, batch=True)
        self.spend.settle(0, 0, prompt + completion, usd, endpoint=self.scope, prompt=prompt, completion=completion)
        self._used[0] += prompt + completion
        self._used[1] += usd

    def collected(self, held: tuple[float, float]) -> None:
        """A batch holding ``held`` of the budget was collected (its answers' usage is recorded next)."""
        self._held[0] += held[0]
        self._held[1] += held[1]

    def settle_collected(self) -> None:
        """Settle the holds of the batches collected since the last call, their answers' usage recorded by now.

        Called once a group's answers have all been recorded (``record_usage``): the holds
        give way to what was used, never before it is counted.
        """
        held, used = (self._held[0], self._held[1]), (self._used[0], self._used[1])
        self._held[:] = [0.0, 0.0]
        self._used[:] = [0.0, 0.0]
        if self.spend is not None and any(held + used):
            self.spend.settle_hold(held, used)

    def validate(self, body: Any) -> LineFailure | None:
        """Online mode's check of a 2xx reply (the handler's parse: choices present, an answer in them)."""
        try:
            self.handler.parse(200, body)
        except Exception as exc:  # noqa: BLE001 - classified like an online reply that does not parse
            failure = classify(exc, secrets=self.handler.secrets)
            return LineFailure(200, failure.retryable, f"batch line: {failure.message}")
        return None


def collect_trigger(
    pipeline: beam.Pipeline, endpoints: Sequence[tuple[str, str, ModelTarget]], journal_dir: str, label: str
) -> beam.PCollection[Any]:
    """``((name, shard), None)`` for shard 0 and every shard with a live batch: makes those keys' calls happen.

    ``endpoints`` are the batch-mode endpoints, as ``(name, scope, model)`` (``name`` the first
    part of their keys); the record is read when the graph is built (a ``--resume`` attaches
    to what earlier invocations left live).
    """
    folder = ledger_dir(journal_dir)
    files = files_for(folder)
    keys = set()
    for name, scope, model in endpoints:
        keys.add((name, 0))
        if files.match(f"{folder}/*.json"):
            state = BatchLedger(folder, files, scope).load()
            shards = (_shard_of(state.requests_of(batch), model) for batch in state.live())
            keys.update((name, shard) for shard in shards if shard is not None)
    return pipeline | label >> beam.Create([(key, None) for key in sorted(keys)])


def submit_then_collect(grouped: beam.PCollection[Any], step: Callable[[bool], beam.DoFn], label: str) -> Any:
    """Every key submits first (``step(False)``), then every key collects (``step(True)``) once all have submitted."""
    submitted = grouped | f"Submit{label}" >> beam.ParDo(step(False))
    return grouped | f"Collect{label}" >> beam.ParDo(step(True), beam.pvalue.AsList(submitted))


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
    endpoint: BatchEndpoint,
    url: str,
    requests: list[BatchRequest],
    journal_dir: str,
    output: str,
    shard: int | None = None,
    collect: bool = True,
) -> dict[str, BatchOutcome]:
    """Bring ``requests`` (all of one endpoint URL and one ``shard``) through the Batch API; an outcome per custom_id.

    Only the live batches of ``shard`` are polled and collected (every one when None);
    without ``collect`` nothing is polled: what is not yet in a batch is submitted.

    Raises:
        EvaluatorError: a Files or Batches call failed for good (every batch so far is recorded).
    """
    try:
        return asyncio.run(_run(endpoint, url, requests, journal_dir, output, shard, collect))
    except BatchApiError as exc:
        raise EvaluatorError(
            f"batch mode: {endpoint.redactor.text(str(exc))}",
            hint="Every batch created so far is recorded in OUT_DIR/_responses/batches/; rerun with --resume "
            "to attach to them once the Batch API answers again.",
        ) from None


async def _run(
    endpoint: BatchEndpoint,
    url: str,
    requests: list[BatchRequest],
    journal_dir: str,
    output: str,
    shard: int | None,
    collect: bool,
) -> dict[str, BatchOutcome]:
    model, settings = endpoint.model, endpoint.model.batch
    timeout = max(endpoint.request_timeout or 0.0, 300.0)  # an upload or download may be 200 MB
    http = HttpClient(4, timeout, ca_bundle=model.ca_bundle, max_response_bytes=_REPLY_CAP)
    query = url.partition("?")[2]
    query = f"?{query}" if query else ""
    base = endpoint_urls(model.url)[0]
    journal = journal_for(journal_dir)
    folder = ledger_dir(journal_dir)
    run = BatchRun(
        client=BatchClient(http, base, query, endpoint.handler.headers, endpoint.max_retries),
        # The provider's ids are its own: they are recorded with its Batch API (base URL and query) and the model.
        ledger=BatchLedger(
            folder, files_for(folder), endpoint.scope, base + query, model.name, None if shard is None else str(shard)
        ),
        settings=settings,
        endpoint=batch_endpoint(url, settings.endpoint),
        max_retries=endpoint.max_retries,
        validate=endpoint.validate,
        record=lambda key, body: journal.record(key, endpoint.redactor.value(body), model.name),
        sync=journal.sync,
        metadata={"beameval_output": output[-512:], "beameval_endpoint": endpoint.scope},
        charge=endpoint.charge,
        collected=endpoint.collected,
        owns=None if shard is None else (lambda ids: _shard_of(ids, model) in (shard, None)),
    )
    try:
        return await run_batches(run, requests, collect)
    finally:
        await http.aclose()


def live_batches(config: EvalConfig, journal_dir: str, cancel: bool) -> list[str]:
    """The batches recorded in ``journal_dir`` and not collected that the provider still runs; ``cancel`` cancels them.

    Each is named with its endpoint (``batch_7 (target at http://h/v1)``). Only the endpoints
    of ``config`` can be asked (their keys are in it). A listing or poll that fails raises
    ``EvaluatorError``: nothing is deleted on a guess.
    """
    endpoints: list[tuple[str, ModelTarget, TargetHandler]] = []
    target = config.target
    if uses_batch_mode(config) and target is not None and target.model is not None:
        endpoints.append((TARGET_SCOPE, target.model, make_handler(target, config.params, target.api_key())))
    for key, metric in batch_metrics(config.metrics):
        access = metric.endpoint_access
        assert isinstance(access, ModelTarget)  # batch_metrics keeps only model endpoints
        endpoints.append((metric_scope(key), access, metric.endpoint_handler()))
    folder = ledger_dir(journal_dir)
    files = files_for(folder)
    if not endpoints or not files.match(f"{folder}/*.json"):
        return []
    try:
        return asyncio.run(_live(endpoints, folder, files, cancel, config.params.max_retries))
    except BatchApiError as exc:
        secrets = [value for _, model, _ in endpoints for value in model.secret_values()]
        raise EvaluatorError(
            f"batch mode: {Redactor(secrets).text(str(exc))}",
            hint="The batches recorded in OUT_DIR/_responses/batches/ could not be checked at the provider; "
            "nothing was deleted. Try again once the Batch API answers.",
        ) from None


async def _live(
    endpoints: list[tuple[str, ModelTarget, TargetHandler]], folder: str, files: Any, cancel: bool, retries: int
) -> list[str]:
    found = []
    http = HttpClient(4, 60.0, max_response_bytes=_REPLY_CAP)
    try:
        for scope, model, handler in endpoints:
            base, query = endpoint_urls(model.url)[0], model.url.partition("?")[2]
            query = f"?{query}" if query else ""
            client = BatchClient(http, base, query, handler.headers, retries)
            for batch_id in BatchLedger(folder, files, scope, base + query, model.name).load().live():
                try:
                    status = (await client.get(batch_id)).get("status")
                except BatchApiError as exc:
                    if exc.status == 404:  # the provider no longer has it: nothing to abandon
                        continue
                    raise
                if status in TERMINAL:
                    continue
                if cancel:
                    await client.cancel(batch_id)
                found.append(f"{batch_id} ({scope} at {base})")
    finally:
        await http.aclose()
    return found
