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
* ``AttachReplies`` joins the replies to their rows, a block of ``JOIN_ROWS`` rows at a time.

The local runner holds a ``GroupByKey``'s (and a ``CoGroupByKey``'s) whole input in
memory, so the requests, the waiting rows and the replies cross theirs in compressed
``PackedRows`` (one per key and bundle, as the target's requests do), and the answered
rows leave in packs of a block, which the checkpoint after this stage holds as they are
(``bench/batch.py --judge``: 10^5 rows peaked at 1,446 MiB when each crossed alone).

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
from transforms.async_calls import in_global_window
from transforms.batch_endpoint import (
    PACK_ROWS,
    PENDING,
    BatchEndpoint,
    batch_metrics,
    by_url,
    collect_trigger,
    send_batches,
    shard_key,
    submit_then_collect,
)
from transforms.metric_cache import row_token
from transforms.metric_calls import build_metric_request
from transforms.row_batches import PackedRows

__all__ = ["BatchMetricCalls"]

#: One judge request: row index, sample index, row token, response key, body bytes.
_Request = tuple[int, int, str, str, bytes]

#: Rows per block of the replies' join (and per pack of answered rows that leaves it).
JOIN_ROWS = 5000


def _block(row_index: int) -> int:
    return row_index // JOIN_ROWS


class KeyMetricBatchRequests(beam.DoFn):
    """GeneratedRow -> the row, or packs of it and its requests (one per key and bundle).

    On ``waiting``: ``(block, PackedRows of (token, row))``; on ``requests``: ``((key, shard),
    PackedRows of (url, request))``. A row waits when a judge in batch mode has a request to
    send for it; otherwise it passes on.
    """

    WAITING = "waiting"
    REQUESTS = "requests"

    def __init__(self, configs: Sequence[MetricConfig]) -> None:
        self._configs = list(configs)

    def setup(self) -> None:
        self._metrics = batch_metrics(self._configs)

    def start_bundle(self) -> None:
        self._packs: dict[tuple[str, Any], PackedRows] = {}

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
        yield from self._add(self.WAITING, _block(row.row_index), (token, row))
        for shard, value in requests:
            yield from self._add(self.REQUESTS, shard, value)

    def finish_bundle(self) -> Iterator[beam.pvalue.TaggedOutput]:
        for (tag, key), pack in self._packs.items():
            yield beam.pvalue.TaggedOutput(tag, in_global_window((key, pack)))

    def _add(self, tag: str, key: Any, value: Any) -> Iterator[beam.pvalue.TaggedOutput]:
        pack = self._packs.setdefault((tag, key), PackedRows())
        pack.append(value)
        if len(pack) >= PACK_ROWS:
            yield beam.pvalue.TaggedOutput(tag, (key, self._packs.pop((tag, key))))


def _model(metric: EndpointMetric[Any]) -> ModelTarget:
    access = metric.endpoint_access
    assert isinstance(access, ModelTarget)  # batch_metrics keeps only model endpoints
    return access


class RunMetricBatches(beam.DoFn):
    """``((metric key, shard), packs of (url, request))`` -> ``(block, PackedRows of (token, key, EndpointReply))``.

    One pack per block of rows (``JOIN_ROWS``) the group's requests came from.

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
        self, keyed: tuple[tuple[str, int], Iterable[PackedRows | None]], _submitted: Any = None
    ) -> Iterator[tuple[int, PackedRows]]:
        (metric_key, shard), grouped = keyed
        endpoint = self._endpoints[metric_key]
        replies: dict[int, PackedRows] = {}
        for url, found in by_url(_unpacked(grouped), endpoint.model.url).items():
            requests: list[_Request] = sorted(found)
            ids = [custom_id(row, sample, metric_key) for row, sample, _, _, _ in requests]
            batch = [BatchRequest(cid, key, content) for cid, (*_, key, content) in zip(ids, requests, strict=True)]
            outcomes = send_batches(endpoint, url, batch, self._journal_dir, self._output, shard, self._collect)
            if self._collect:
                for cid, (row_index, _, token, _, _) in zip(ids, requests, strict=True):
                    reply = (token, metric_key, _reply(endpoint, outcomes[cid]))
                    replies.setdefault(_block(row_index), PackedRows()).append(reply)
        yield from replies.items()


def _unpacked(grouped: Iterable[PackedRows | None]) -> Iterator[tuple[str, _Request] | None]:
    """A group's ``(url, request)``s out of their packs; the collect trigger (None) as it is."""
    for pack in grouped:
        if pack is None:
            yield None
        else:
            yield from pack


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
    """A block's rows and replies, joined -> one pack of its rows, with their judges' batch replies.

    In: ``(block, {row: packs of (token, row), replies: packs of (token, key, reply)})``.
    """

    def process(self, joined: tuple[int, dict[str, Iterable[PackedRows]]]) -> Iterator[PackedRows]:
        _block_index, groups = joined
        replies: dict[str, dict[str, EndpointReply]] = {}
        for pack in groups["replies"]:
            for token, key, reply in pack:
                replies.setdefault(token, {})[key] = reply
        attached = PackedRows()
        for pack in groups["row"]:
            for token, row in pack:
                attached.append(_attach(row, replies.get(token, {})))
        if attached:
            yield attached


def _attach(row: GeneratedRow, replies: dict[str, EndpointReply]) -> GeneratedRow:
    budget = [reply.error for reply in replies.values() if reply.failure_class == "budget"]
    if budget:  # a judge batch was not submitted for the run's budget: the row is skipped, not scored
        failure = RowFailure("scoring", [str(budget[0])], skipped=True)
        return dataclasses.replace(row, metric_responses=None, failure=failure)
    return dataclasses.replace(row, metric_responses={**(row.metric_responses or {}), **replies})


class BatchMetricCalls(beam.PTransform):
    """GeneratedRow -> the same rows, with the replies of every judge in batch mode (the rows that asked, in packs).

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
