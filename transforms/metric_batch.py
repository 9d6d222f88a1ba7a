"""Batch mode for LLM judges: the judge requests left after the store and journal go, together, through a Batch API.

It stands after ``CallMetricEndpoints`` (which sends only the online endpoints' calls) and
before ``ScoreRows``, so a judge request answered by the store or the journal
(``LookupMetricResponses``) is never put into a batch, and a target in batch mode has
answered every row before the first judge request is built (two batch phases, one after
the other, because the judge's step waits for every target answer):

* ``KeyMetricBatchRequests`` builds each row's request for every judge in batch mode
  exactly as online judging does (the metric's ``build_request``), keys it as online mode
  keys it, and sends the row to wait for its replies; a row with nothing to ask passes on;
* the requests are grouped per judge and shard of rows (``transforms.batch_endpoint.shard_key``,
  with its ``collect_trigger``); every key submits first, then collects
  (``transforms.batch_endpoint.submit_then_collect`` and ``send_batches``, in the judge's own scope
  of ``OUT_DIR/_responses/batches/``), charged to the run's budget before each batch; each
  answer is parsed by the judge's handler into the ``EndpointReply`` an online call makes,
  keyed by the row;
* ``AttachReplies`` joins the replies to their rows on the row token.

A request whose batch is still running gets an error reply; the driver sees the live batch
in the submission record and exits 75 without publishing, as for the target.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam

from beameval.cache.key import response_key_from_content
from beameval.config.endpoints import ModelTarget
from beameval.config.params import Params
from beameval.core.records import EndpointReply, GeneratedRow, RowFailure
from beameval.core.redaction import Redactor
from beameval.inference.answers import endpoint_reply
from beameval.inference.batch.ledger import metric_scope
from beameval.inference.batch.lines import BatchRequest, custom_id
from beameval.inference.batch.runner import BatchOutcome
from beameval.inference.budget import RunBudget
from beameval.inference.classify import classify
from beameval.inference.prepared import wire_bytes
from beameval.inference.quota import EndpointQuota
from beameval.metrics.base import EndpointMetric, MetricConfig, MetricContext
from transforms.batch_endpoint import (
    PENDING,
    BatchEndpoint,
    batch_metrics,
    budget_charge,
    by_url,
    collect_trigger,
    send_batches,
    shard_key,
    submit_then_collect,
)
from transforms.metric_cache import row_token
from transforms.metric_calls import build_metric_request

__all__ = ["BatchMetricCalls"]

#: One judge request: row index, sample index, row token, response key, body bytes.
_Request = tuple[int, int, str, str, bytes]


class KeyMetricBatchRequests(beam.DoFn):
    """GeneratedRow -> the row, or ``(token, row)`` on ``waiting`` and ``((key, shard), (url, req))`` on ``requests``.

    A row waits when a judge in batch mode has a request to send for it; otherwise it passes on.
    """

    WAITING = "waiting"
    REQUESTS = "requests"

    def __init__(self, configs: Sequence[MetricConfig]) -> None:
        self._configs = list(configs)

    def setup(self) -> None:
        self._metrics = batch_metrics(self._configs)

    def process(self, row: GeneratedRow) -> Iterator[Any]:
        if row.failure is not None or row.item is None:
            yield row
            return
        replies = dict(row.metric_responses or {})  # the store's and journal's answers are already there
        ctx = MetricContext(row.item, row.sample, baseline=row.baseline)
        token = row_token(row)
        requests = []
        for key, metric in self._metrics:
            if key in replies or not metric.needs_call(ctx):
                continue
            prepared = build_metric_request(metric, ctx)
            if isinstance(prepared, EndpointReply):  # the request cannot be built: the row fails in scoring
                replies[key] = prepared
                continue
            content = wire_bytes(prepared)
            response_key = response_key_from_content(  # the key online judging uses, so the answers interchange
                prepared.url, content, row.sample_index, prepared.headers, metric.endpoint_handler().secrets
            )
            request = (row.row_index, row.sample_index, token, response_key, content)
            requests.append((shard_key(key, row.row_index, _model(metric)), (prepared.url, request)))
        row = dataclasses.replace(row, metric_responses=replies) if replies else row
        if not requests:
            yield row
            return
        yield beam.pvalue.TaggedOutput(self.WAITING, (token, row))
        for keyed in requests:
            yield beam.pvalue.TaggedOutput(self.REQUESTS, keyed)


def _model(metric: EndpointMetric[Any]) -> ModelTarget:
    access = metric.endpoint_access
    assert isinstance(access, ModelTarget)  # batch_metrics keeps only model endpoints
    return access


class RunMetricBatches(beam.DoFn):
    """``((metric key, shard), [(url, request)])`` -> ``(token, (metric key, EndpointReply))`` per request.

    Without ``collect`` it only submits, and emits nothing (``submit_then_collect``).
    """

    def __init__(
        self, configs: Sequence[MetricConfig], journal_dir: str, output: str, params: Params, run_id: str, collect: bool
    ) -> None:
        self._configs = list(configs)
        self._journal_dir = journal_dir
        self._output = output
        self._params = params
        self._run_id = run_id
        self._collect = collect

    def setup(self) -> None:
        self._endpoints = {
            key: _endpoint(key, metric, self._params, self._run_id) for key, metric in batch_metrics(self._configs)
        }

    def process(
        self, keyed: tuple[tuple[str, int], Iterable[tuple[str, _Request] | None]], _submitted: Any = None
    ) -> Iterator[tuple[str, Any]]:
        (metric_key, shard), grouped = keyed
        endpoint = self._endpoints[metric_key]
        for url, found in by_url(grouped, endpoint.model.url).items():
            requests: list[_Request] = sorted(found)
            ids = [custom_id(row, sample, metric_key) for row, sample, _, _, _ in requests]
            batch = [BatchRequest(cid, key, content) for cid, (*_, key, content) in zip(ids, requests, strict=True)]
            outcomes = send_batches(endpoint, url, batch, self._journal_dir, self._output, shard, self._collect)
            if self._collect:
                for cid, (_, _, token, _, _) in zip(ids, requests, strict=True):
                    yield token, (metric_key, _reply(endpoint, outcomes[cid]))


def _endpoint(key: str, metric: EndpointMetric[Any], params: Params, run_id: str) -> BatchEndpoint:
    settings = metric.endpoint_settings
    access = _model(metric)
    return BatchEndpoint(
        access,
        metric.endpoint_handler(),
        settings.max_retries,
        settings.request_timeout,
        metric_scope(key),
        Redactor(access.secret_values()),
        budget_charge(params, access, run_id, metric_scope(key)),
        RunBudget.of(EndpointQuota.of(access, params, run_id)),  # the job's ledger, if any
    )


def _reply(endpoint: BatchEndpoint, outcome: BatchOutcome) -> EndpointReply:
    """The reply online judging would record for the same answer (or failure); ``attempts`` counts batches."""
    attempts = outcome.submissions
    if outcome.skipped:  # never submitted: the row is skipped, as an online call the budget refused
        message = "not sent: its batch would have passed the run's budget (params.budget)"
        return EndpointReply(error=message, error_kind="endpoint", attempts=attempts, failure_class="budget")
    if outcome.pending:
        return EndpointReply(error=f"the judge request is {PENDING}", error_kind="endpoint", attempts=attempts)
    if outcome.failure is not None:
        failure = outcome.failure
        kind = classify(failure.status).failure_class if failure.status is not None else "fatal"
        return EndpointReply(
            error=endpoint.redactor.text(failure.error),
            error_kind="endpoint",
            status=failure.status,
            attempts=attempts,
            failure_class=kind,
        )
    try:
        sample = endpoint.handler.parse(200, outcome.body)
    except Exception as exc:  # noqa: BLE001 - a reply that does not parse fails the call, as online
        message = endpoint.redactor.text(classify(exc).message)
        return EndpointReply(error=message, error_kind="endpoint", status=200, attempts=attempts, failure_class="fatal")
    reply = endpoint_reply(sample, status=200, attempts=attempts)
    endpoint.record_usage(reply.prompt_tokens, reply.completion_tokens)
    return reply


class _AttachReplies(beam.DoFn):
    """``(token, {row, replies})`` -> the row with its judges' batch replies in ``metric_responses``."""

    def process(self, joined: tuple[str, dict[str, Iterable[Any]]]) -> Iterator[GeneratedRow]:
        _token, groups = joined
        replies = dict(groups["replies"])
        budget = [reply.error for reply in replies.values() if reply.failure_class == "budget"]
        for row in groups["row"]:
            if budget:  # a judge batch was not submitted for the run's budget: the row is skipped, not scored
                failure = RowFailure("scoring", [str(budget[0])], skipped=True)
                yield dataclasses.replace(row, metric_responses=None, failure=failure)
                continue
            yield dataclasses.replace(row, metric_responses={**(row.metric_responses or {}), **replies})


class BatchMetricCalls(beam.PTransform):
    """GeneratedRow -> the same rows, with the replies of every judge in batch mode.

    Args:
        configs: every metric config of the run, in config order.
        journal_dir: ``OUT_DIR/_responses`` (the journal, and the submission record in it).
        output: the run's output, named in each batch's metadata.
        params: the run's parameters (its budget).
        run_id: the run's id (its budget is the one its online requests draw from).
    """

    def __init__(
        self,
        configs: Sequence[MetricConfig],
        journal_dir: str,
        output: str,
        params: Params | None = None,
        run_id: str = "",
    ) -> None:
        super().__init__()
        self._configs = list(configs)
        self._journal_dir = journal_dir
        self._output = output
        self._params = params or Params()
        self._run_id = run_id

    def expand(self, rows: beam.PCollection[GeneratedRow]) -> beam.PCollection[GeneratedRow]:
        keyed = rows | "KeyMetricBatchRequests" >> beam.ParDo(KeyMetricBatchRequests(self._configs)).with_outputs(
            KeyMetricBatchRequests.WAITING, KeyMetricBatchRequests.REQUESTS, main="done"
        )
        endpoints = [(key, metric_scope(key), _model(metric)) for key, metric in batch_metrics(self._configs)]
        trigger = collect_trigger(rows.pipeline, endpoints, self._journal_dir, "CollectMetricTrigger")
        grouped = (
            (keyed[KeyMetricBatchRequests.REQUESTS], trigger)
            | "WithTrigger" >> beam.Flatten()
            | "MetricRequestsByShard" >> beam.GroupByKey()
        )
        configs, journal, output, params, run_id = (
            self._configs,
            self._journal_dir,
            self._output,
            self._params,
            self._run_id,
        )
        replies = submit_then_collect(
            grouped,
            lambda collect: RunMetricBatches(configs, journal, output, params, run_id, collect),
            "MetricBatches",
        )
        answered = (
            {"row": keyed[KeyMetricBatchRequests.WAITING], "replies": replies}
            | "JoinReplies" >> beam.CoGroupByKey()
            | "AttachReplies" >> beam.ParDo(_AttachReplies())
        )
        return (keyed.done, answered) | "Rows" >> beam.Flatten()
