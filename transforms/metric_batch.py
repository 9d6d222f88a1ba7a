"""Batch mode for LLM judges: ``MetricBatch``, their ``BatchPlan``, and ``BatchMetricCalls``, their stage.

It stands after ``CallMetricEndpoints`` (which sends only the online endpoints' calls) and
before ``ScoreRows``: a judge request the store or the journal answered
(``LookupMetricResponses``) never goes into a batch, and a target in batch mode has answered
every row before the first judge request is built (its step waits for every target answer).
A row's request per judge in batch mode is built as online judging builds it (the metric's
``build_request``) and keyed as online mode keys it, in the judge's own scope of the
submission record; the row waits for its replies (a row with nothing to ask passes on). Each
answer becomes the ``EndpointReply`` an online call makes (``endpoint_reply``), and
``_AttachReplies`` joins the replies to their rows a block of ``JOIN_ROWS`` rows at a time:
the waiting rows and the replies cross the join in compressed ``PackedRows``, and the rows
leave in packs of a block (``bench/batch.py --judge``: 10^5 rows peaked at 1,446 MiB when
each crossed alone).
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
from beameval.inference.batch.runner import BatchOutcome
from beameval.inference.budget import RunBudget
from beameval.inference.prepared import wire_bytes
from beameval.inference.quota import EndpointQuota
from beameval.metrics.base import EndpointMetric, MetricConfig, MetricContext
from transforms.batch_calls import REQUESTS, BatchCalls, BatchPlan, Request, batch_answer
from transforms.batch_endpoint import PENDING, BatchEndpoint, batch_metrics, shard_key
from transforms.metric_cache import row_token
from transforms.metric_calls import build_metric_request
from transforms.row_batches import PackedRows

__all__ = ["BatchMetricCalls", "MetricBatch"]

#: Rows per block of the replies' join (and per pack of answered rows that leaves it).
JOIN_ROWS = 5000
#: ``KeyBatchRequests``'s output of the rows that wait for their judges' replies: ``(block, (token, row))``.
WAITING = "waiting"


def _block(row_index: int) -> int:
    return row_index // JOIN_ROWS


def _model(metric: EndpointMetric[Any]) -> ModelTarget:
    access = metric.endpoint_access
    assert isinstance(access, ModelTarget)  # batch_metrics keeps only model endpoints
    return access


class MetricBatch(BatchPlan):
    """The judges' batch plan: a row's request per judge in batch mode (its ``Request`` keeps the row's token).

    A row with a request waits on ``WAITING``, in its block; a request's result is
    ``(block, (token, metric key, EndpointReply))``, emitted one pack per block of the group.
    """

    label = "Metric"
    tags = (WAITING,)

    def __init__(self, configs: Sequence[MetricConfig], params: Params, run_id: str) -> None:
        self._configs = list(configs)
        self._params = params
        self._run_id = run_id

    def endpoints(self) -> list[tuple[str, str, ModelTarget]]:
        return [(key, metric_scope(key), _model(metric)) for key, metric in batch_metrics(self._configs)]

    def setup(self) -> None:
        self._metrics = batch_metrics(self._configs)

    def batch_endpoints(self) -> dict[str, BatchEndpoint]:
        return {key: self._endpoint(key, metric) for key, metric in batch_metrics(self._configs)}

    def _endpoint(self, key: str, metric: EndpointMetric[Any]) -> BatchEndpoint:
        settings = metric.endpoint_settings
        access = _model(metric)
        return BatchEndpoint(
            access,
            metric.endpoint_handler(),
            settings.max_retries,
            settings.request_timeout,
            metric_scope(key),
            Redactor(access.secret_values()),
            RunBudget.of(EndpointQuota.of(access, self._params, self._run_id)),  # the job's ledger, if any
        )

    def requests(self, row: GeneratedRow) -> Iterator[tuple[str | None, Any, Any]]:
        if row.failure is not None or row.item is None:
            yield None, None, row
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
            request = (row.row_index, row.sample_index, response_key, content, token)
            requests.append((shard_key(key, row.row_index, _model(metric)), (prepared.url, request)))
        row = dataclasses.replace(row, metric_responses=replies) if replies else row
        if not requests:
            yield None, None, row
            return
        yield WAITING, _block(row.row_index), (token, row)
        for shard, value in requests:
            yield REQUESTS, shard, value

    def result(
        self, endpoint: BatchEndpoint, name: str, url: str, request: Request, outcome: BatchOutcome
    ) -> tuple[int, tuple[str, str, EndpointReply]]:
        """The reply online judging would record for the same answer (or failure); ``attempts`` counts batches."""
        answer = batch_answer(endpoint, outcome, f"the judge request is {PENDING}")
        if isinstance(answer, EndpointReply):
            reply = answer
        else:
            reply = endpoint_reply(answer, status=200, attempts=outcome.submissions)
            endpoint.record_usage(reply.prompt_tokens, reply.completion_tokens)
        return _block(request[0]), (request[4], name, reply)

    def emit(self, results: Iterator[tuple[int, tuple[str, str, EndpointReply]]]) -> Iterator[tuple[int, PackedRows]]:
        replies: dict[int, PackedRows] = {}
        for block, reply in results:
            replies.setdefault(block, PackedRows()).append(reply)
        yield from replies.items()


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


class BatchMetricCalls(BatchCalls):
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
        super().__init__(MetricBatch(configs, params or Params(), run_id), journal_dir, output)

    def expand(self, rows: beam.PCollection[GeneratedRow]) -> beam.PCollection[GeneratedRow]:
        keyed, replies = self.batches(rows)
        answered = (
            {"row": keyed[WAITING], "replies": replies}
            | "JoinReplies" >> beam.CoGroupByKey()
            | "AttachReplies" >> beam.ParDo(_AttachReplies())
        )
        return (keyed.done, answered) | "Rows" >> beam.Flatten()
