"""CallMetricEndpoints: send each row's metric endpoint requests (LLM judge, remote scorer) before scoring.

Placed between generation and ``ScoreRows`` when a configured metric is an
``EndpointMetric``; a metric whose model is in ``mode: batch`` is left to
``transforms.metric_batch``. For every row that has not failed, each endpoint metric builds its
request, which goes to that metric's shared per-process ``InferenceEngine`` (retries,
limiter and keep-alive pool included); when all of a row's calls have completed the row is
emitted with ``metric_responses`` holding one ``EndpointReply`` per metric key. Rows are
emitted as their calls complete and ``finish_bundle`` waits for the rest, as in
``GenerateSamples`` (the bookkeeping is shared: ``transforms.async_calls``). Failures are
recorded in the reply, never raised here: the metric's ``score`` decides whether they fail
the row.

As in ``GenerateSamples``, each call is looked up in the run's journal just before it is
sent, so a bundle that Beam runs again never pays for a call its first attempt made.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from beameval.cache.journal_index import row_token
from beameval.cache.key import prepared_key
from beameval.cache.recording import RecordingHandler, journal_answer
from beameval.config.params import Params
from beameval.core.crash_points import fail_once
from beameval.core.errors import EvaluatorError
from beameval.core.records import EndpointReply, GeneratedRow, RowFailure
from beameval.core.redaction import Redactor
from beameval.core.scoring import metric_keys
from beameval.inference.answers import endpoint_reply
from beameval.inference.engine import InferenceEngine
from beameval.inference.not_sent import STOPPING
from beameval.inference.outcome import Outcome
from beameval.inference.prepared import PreparedRequest
from beameval.inference.quota import EndpointQuota
from beameval.inference.targets.base import TargetHandler
from beameval.metrics.base import EndpointMetric, MetricConfig, MetricContext
from beameval.metrics.registry import metric_class, resolve
from transforms import NAMESPACE
from transforms.async_calls import PendingCalls, in_global_window
from transforms.batch_endpoint import in_batch_mode
from transforms.cache import journal_for
from transforms.guard import guarded
from transforms.worker_gc import freeze_startup_heap

__all__ = ["CallMetricEndpoints", "build_metric_request", "needs_metric_calls", "reply_from_outcome"]


def needs_metric_calls(configs: Sequence[MetricConfig]) -> bool:
    """True when any metric calls an endpoint, so the graph needs ``CallMetricEndpoints``."""
    return any(issubclass(metric_class(config.type), EndpointMetric) for config in configs)


def build_metric_request(metric: EndpointMetric[Any], ctx: MetricContext) -> PreparedRequest | EndpointReply:
    """A row's request for ``metric``, or the ``request`` error reply that fails the row when it cannot be built."""
    try:
        return metric.build_request(ctx)
    except EvaluatorError as exc:
        return EndpointReply(error=str(exc), error_kind="request")
    except Exception as exc:  # noqa: BLE001 - a metric bug must fail its row, not the run
        return EndpointReply(error=f"building the request raised {type(exc).__name__}: {exc}", error_kind="request")


def reply_from_outcome(outcome: Outcome, redactor: Redactor | None = None) -> EndpointReply:
    """The row-level record of one metric call's outcome: checked as a stored reply is, the key masked in errors.

    The reply itself is kept as received for the metric to parse (``ScoreRows`` masks what is written).
    """
    redactor = redactor or Redactor()
    error = outcome.error
    if error is None and outcome.sample is not None:
        reply = endpoint_reply(
            outcome.sample, status=outcome.status, attempts=outcome.attempts, latency_s=outcome.latency_s
        )
        if reply.error is None:
            return reply
        return dataclasses.replace(reply, error=redactor.text(reply.error))
    return EndpointReply(
        error=redactor.text(str(error) if error is not None else "the endpoint gave no answer"),
        error_kind="endpoint",
        status=outcome.status,
        attempts=outcome.attempts,
        latency_s=outcome.latency_s,
        failure_class=error.failure_class if error is not None else None,
    )


@dataclasses.dataclass(slots=True)
class _RowCalls:
    """A row waiting for its metric calls."""

    row: GeneratedRow
    replies: dict[str, EndpointReply]
    remaining: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class _Endpoint:
    key: str
    metric: EndpointMetric[Any]
    handler: TargetHandler
    engine: InferenceEngine
    max_retries: int
    #: A twin that never sends, so keys are those of the request as first built (see GenerateSamples).
    key_metric: EndpointMetric[Any]


class CallMetricEndpoints(beam.DoFn):
    """GeneratedRow -> the same row with ``metric_responses`` from every endpoint metric.

    Args:
        metric_configs: every metric config of the run, in config order (the metric keys
            are computed as ``ScoreRows`` computes them).
    """

    def __init__(
        self,
        metric_configs: Sequence[MetricConfig],
        journal_dir: str | None = None,
        params: Params | None = None,
        run_id: str = "",
        joined_shards: Sequence[str] = (),
    ) -> None:
        self._configs = list(metric_configs)
        self._journal_dir = journal_dir  # OUT_DIR/_responses: every successful call is recorded there
        self._params = params or Params()  # the budget and the worker count (rate limits, EndpointQuota)
        self._run_id = run_id
        self._joined_shards = list(joined_shards)  # read by the graph-time join: skipped at send time

    def setup(self) -> None:
        endpoints = []
        for key, config in zip(metric_keys(self._configs), self._configs, strict=True):
            if not issubclass(metric_class(config.type), EndpointMetric):
                continue
            metric = resolve(config, key)
            assert isinstance(metric, EndpointMetric)
            if in_batch_mode(metric):  # its requests go through the Batch API (transforms.metric_batch)
                continue
            handler = metric.endpoint_handler()
            settings = metric.endpoint_settings
            quota = EndpointQuota.of(metric.endpoint_access, self._params, self._run_id)
            engine = InferenceEngine.shared(
                handler, settings.parallelism, settings.max_retries, settings.request_timeout, quota=quota
            )
            twin = resolve(config, key)
            assert isinstance(twin, EndpointMetric)
            # Each call of the metric (a pairwise judge's two orders) shares its engine and handler.
            for call, twin_call in zip(metric.endpoint_calls(), twin.endpoint_calls(), strict=True):
                endpoints.append(_Endpoint(call.key, call, handler, engine, settings.max_retries, twin_call))
        self._endpoints = endpoints
        self._redactors = {e.key: Redactor(e.metric.endpoint_access.secret_values()) for e in endpoints}
        self._journal = journal_for(self._journal_dir) if self._journal_dir else None
        if self._journal is not None:
            self._journal.index.ignore(self._joined_shards)
        # Keep a few requests queued per slot so the engines never wait for the DoFn.
        self._max_pending = 2 * sum(endpoint.metric.endpoint_settings.parallelism for endpoint in endpoints)
        self._requests = Metrics.counter(NAMESPACE, "metric_requests")
        self._attempts = Metrics.counter(NAMESPACE, "metric_request_attempts")
        self._failed = Metrics.counter(NAMESPACE, "metric_requests_failed")
        self._journal_hits = Metrics.counter(NAMESPACE, "metric_journal_hits")
        self._latency = Metrics.distribution(NAMESPACE, "metric_latency_ms")
        freeze_startup_heap()  # last: what setup built is long-lived too

    def start_bundle(self) -> None:
        self._pending: PendingCalls[tuple[_RowCalls, str]] = PendingCalls(self._max_pending)
        self._first_row: str | None = None  # names the bundle for the test's injected failure
        if self._journal is not None:
            self._journal.index.refresh()  # what other workers (a lost one too) recorded since the last bundle

    def process(self, row: GeneratedRow) -> Iterator[GeneratedRow]:
        token = row_token(row.row_index, row.sample_index)
        if self._first_row is None:
            self._first_row = token
        if row.failure is not None or row.item is None or not self._endpoints:
            yield row
            return
        calls = _RowCalls(row, dict(row.metric_responses or {}))  # replies from the store are already there
        ctx = MetricContext(row.item, row.sample, baseline=row.baseline)
        submitted = []
        for endpoint in self._endpoints:
            if endpoint.key in calls.replies or not endpoint.metric.needs_call(ctx):
                continue
            prepared = build_metric_request(endpoint.metric, ctx)
            if isinstance(prepared, EndpointReply):
                calls.replies[endpoint.key] = prepared
                continue
            key = self._key(endpoint, ctx, row)
            answered = None if key is None else self._from_journal(endpoint, key, token)
            if answered is not None:
                calls.replies[endpoint.key] = answered
                continue
            submitted.append((endpoint, prepared, key))
        if not submitted:
            yield self._finished(calls)
            return
        calls.remaining = len(submitted)
        for endpoint, prepared, key in submitted:
            if key is None:
                done = self._pending.add((calls, endpoint.key))
                endpoint.engine.send(prepared, endpoint.handler, done, max_retries=endpoint.max_retries)
            else:
                self._send(endpoint, prepared, key, calls, token)
        yield from self._drain(block=self._pending.full)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for row in self._drain(block=True, until_empty=True):
            yield in_global_window(row)
        if self._journal is not None:
            self._journal.sync()
        if self._first_row is not None:
            fail_once("metric-calls-answered", self._first_row)  # tests: a later stage failing once

    def _key(self, endpoint: _Endpoint, ctx: MetricContext, row: GeneratedRow) -> str | None:
        """The call's response key, from the twin (the request as first built); None without a journal."""
        if self._journal is None:
            return None
        try:
            return prepared_key(endpoint.key_metric.build_request(ctx), row.sample_index, endpoint.handler.secrets)
        except Exception:  # noqa: BLE001 - it was just built once; if the twin fails, record nothing
            return None

    def _from_journal(self, endpoint: _Endpoint, key: str, token: str) -> EndpointReply | None:
        """The call answered by its own call of an earlier attempt of its bundle, from the journal; None: send it.

        It counts as one of the run's requests: the attempt that sent it was thrown away
        with its bundle, so no other row carries its cost.
        """
        assert self._journal is not None
        sample = journal_answer(self._journal, endpoint.handler, key, token)
        if sample is None:
            return None
        self._journal_hits.inc()
        return endpoint_reply(sample, status=200, attempts=1)

    def _send(self, endpoint: _Endpoint, prepared: PreparedRequest, key: str, calls: _RowCalls, token: str) -> None:
        """Send one call, recording its answer, unless its call from an earlier attempt is in flight here."""
        assert self._journal is not None
        model = prepared.body.get("model")
        handler = RecordingHandler(
            endpoint.handler,
            self._journal.for_row(token),
            key,
            model if isinstance(model, str) else None,
            self._redactors[endpoint.key],
        )
        self._journal.in_flight.send_once(
            key,
            token,
            lambda done: endpoint.engine.send(prepared, handler, done, max_retries=endpoint.max_retries),
            self._pending.add((calls, endpoint.key)),
        )

    def _drain(self, block: bool, until_empty: bool = False) -> Iterator[GeneratedRow]:
        for (calls, key), outcome in self._pending.drain(block, until_empty):
            reply = guarded(
                "CallMetricEndpoints",
                "scoring",
                calls.row.row_index,
                functools.partial(reply_from_outcome, outcome, self._redactors[key]),
                lambda failure: EndpointReply(error=failure.text, error_kind="request"),
            )
            calls.replies[key] = reply
            self._requests.inc()
            self._attempts.inc(reply.attempts)
            self._latency.update(int(reply.latency_s * 1000))
            if reply.error is not None:
                self._failed.inc()
            calls.remaining -= 1
            if calls.remaining == 0:
                yield self._finished(calls)

    @staticmethod
    def _finished(calls: _RowCalls) -> GeneratedRow:
        stopped = [reply for reply in calls.replies.values() if reply.failure_class in STOPPING]
        if stopped:  # a metric call was not sent, the run is stopping: the row is skipped, not scored
            Metrics.counter(NAMESPACE, f"rows_skipped_{stopped[0].failure_class}").inc()  # why the run stopped
            failure = RowFailure("scoring", [str(stopped[0].error)], skipped=True)
            return dataclasses.replace(calls.row, metric_responses=None, failure=failure)
        return dataclasses.replace(calls.row, metric_responses=calls.replies)
