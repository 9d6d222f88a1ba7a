"""CallMetricEndpoints: send each row's metric endpoint requests (LLM judge, remote scorer) before scoring.

Placed between generation and ``ScoreRows`` when a configured metric is an
``EndpointMetric``; a metric whose model is in ``mode: batch`` is left to
``transforms.metric_batch``. For every row that has not failed, each endpoint metric builds its
request, which goes to that metric's shared per-process ``InferenceEngine`` (retries,
limiter and keep-alive pool included); when all of a row's calls have completed the row is
emitted with ``metric_responses`` holding one ``EndpointReply`` per metric key. Failures are
recorded in the reply, never raised here: the metric's ``score`` decides whether they fail
the row.

The sending is ``transforms.endpoint_calls``'s, as for the target: each call is looked up
in the run's journal just before it is sent, so a bundle that Beam runs again never pays
for a call its first attempt made.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from apache_beam.metrics import Metrics

from beameval.cache.key import prepared_key
from beameval.config.params import Params
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
from beameval.metrics.base import EndpointMetric, MetricConfig, MetricContext
from beameval.metrics.registry import metric_class, resolve
from transforms import NAMESPACE
from transforms.batch_endpoint import in_batch_mode
from transforms.endpoint_calls import Answer, Call, CallEndpoints, CallPlan, LiveEndpoint, Planned, Ready
from transforms.guard import guarded

__all__ = ["CallMetricEndpoints", "MetricCalls", "build_metric_request", "needs_metric_calls", "reply_from_outcome"]


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


#: A row waiting for its metric calls, with the replies it has so far.
_RowReplies = tuple[GeneratedRow, dict[str, EndpointReply]]


@dataclasses.dataclass(frozen=True, slots=True)
class _Endpoint:
    key: str
    metric: EndpointMetric[Any]
    live: LiveEndpoint
    #: A twin that never sends, so keys are those of the request as first built (see TargetCalls).
    key_metric: EndpointMetric[Any]


class MetricCalls(CallPlan[GeneratedRow, GeneratedRow]):
    """The endpoint metrics' plan: a row's calls (one per metric key not yet answered), its replies recorded on it.

    Args:
        metric_configs: every metric config of the run, in config order (the metric keys
            are computed as ``ScoreRows`` computes them).
        params: the budget and the worker count (rate limits, ``EndpointQuota``).
        run_id: the job (shared rate limits and budget).
    """

    counter_prefix = "metric_"
    crash_point = "metric-calls-answered"

    def __init__(self, metric_configs: Sequence[MetricConfig], params: Params, run_id: str) -> None:
        self._configs = list(metric_configs)
        self._params = params
        self._run_id = run_id

    def setup(self, journalled: bool) -> None:
        self._journalled = journalled
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
            live = LiveEndpoint(handler, engine, Redactor(metric.endpoint_access.secret_values()), settings.max_retries)
            twin = resolve(config, key)
            assert isinstance(twin, EndpointMetric)
            # Each call of the metric (a pairwise judge's two orders) shares its engine and handler.
            for call, twin_call in zip(metric.endpoint_calls(), twin.endpoint_calls(), strict=True):
                endpoints.append(_Endpoint(call.key, call, live, twin_call))
        self._endpoints = endpoints
        self._redactors = {endpoint.key: endpoint.live.redactor for endpoint in endpoints}
        # Keep a few requests queued per slot so the engines never wait for the DoFn.
        self.max_pending = 2 * sum(endpoint.metric.endpoint_settings.parallelism for endpoint in endpoints)
        self._requests = Metrics.counter(NAMESPACE, "metric_requests")
        self._attempts = Metrics.counter(NAMESPACE, "metric_request_attempts")
        self._failed = Metrics.counter(NAMESPACE, "metric_requests_failed")
        self._latency = Metrics.distribution(NAMESPACE, "metric_latency_ms")

    def plan(self, row: GeneratedRow) -> Planned[_RowReplies] | Ready[GeneratedRow]:
        if row.failure is not None or row.item is None or not self._endpoints:
            return Ready(row)
        replies = dict(row.metric_responses or {})  # replies from the store are already there
        ctx = MetricContext(row.item, row.sample, baseline=row.baseline)
        calls = []
        for endpoint in self._endpoints:
            if endpoint.key in replies or not endpoint.metric.needs_call(ctx):
                continue
            prepared = build_metric_request(endpoint.metric, ctx)
            if isinstance(prepared, EndpointReply):
                replies[endpoint.key] = prepared
                continue
            key = self._key(endpoint, ctx, row) if self._journalled else None
            model = prepared.body.get("model")
            calls.append(Call(endpoint.key, endpoint.live, prepared, key, model if isinstance(model, str) else None))
        if not calls:
            return Ready(_finished(row, replies))
        return Planned((row, replies), calls)

    def finished(self, element: _RowReplies, answers: Mapping[str, Answer]) -> GeneratedRow:
        row, replies = element
        for key, answer in answers.items():
            reply = guarded(
                "CallMetricEndpoints",
                "scoring",
                row.row_index,
                functools.partial(reply_from_outcome, answer.outcome, self._redactors[key]),
                lambda failure: EndpointReply(error=failure.text, error_kind="request"),
            )
            replies[key] = reply
            if answer.journalled:  # counted with the journal hits
                continue
            self._requests.inc()
            self._attempts.inc(reply.attempts)
            self._latency.update(int(reply.latency_s * 1000))
            if reply.error is not None:
                self._failed.inc()
        return _finished(row, replies)

    @staticmethod
    def _key(endpoint: _Endpoint, ctx: MetricContext, row: GeneratedRow) -> str | None:
        """The call's response key, from the twin (the request as first built)."""
        try:
            secrets = endpoint.live.handler.secrets
            return prepared_key(endpoint.key_metric.build_request(ctx), row.sample_index, secrets)
        except Exception:  # noqa: BLE001 - it was just built once; if the twin fails, record nothing
            return None


def _finished(row: GeneratedRow, replies: dict[str, EndpointReply]) -> GeneratedRow:
    stopped = [reply for reply in replies.values() if reply.failure_class in STOPPING]
    if stopped:  # a metric call was not sent, the run is stopping: the row is skipped, not scored
        Metrics.counter(NAMESPACE, f"rows_skipped_{stopped[0].failure_class}").inc()  # why the run stopped
        failure = RowFailure("scoring", [str(stopped[0].error)], skipped=True)
        return dataclasses.replace(row, metric_responses=None, failure=failure)
    return dataclasses.replace(row, metric_responses=replies)


class CallMetricEndpoints(CallEndpoints[GeneratedRow, GeneratedRow]):
    """GeneratedRow -> the same row with ``metric_responses`` from every endpoint metric (``MetricCalls``).

    Args:
        metric_configs: every metric config of the run, in config order.
        journal_dir: OUT_DIR/_responses: every successful call is recorded there.
        params: the budget and the worker count.
        run_id: the job.
        joined_shards: read by the graph-time join: skipped at send time.
    """

    def __init__(
        self,
        metric_configs: Sequence[MetricConfig],
        journal_dir: str | None = None,
        params: Params | None = None,
        run_id: str = "",
        joined_shards: Sequence[str] = (),
    ) -> None:
        super().__init__(MetricCalls(metric_configs, params or Params(), run_id), journal_dir, joined_shards)
