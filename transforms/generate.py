"""GenerateSamples: render each row's prompt and call the target through the shared engine.

The DoFn hands requests to the worker process's ``InferenceEngine`` (one event loop, one
connection pool and one concurrency limit per process, shared by every DoFn instance and
thread) and emits results as they complete; ``finish_bundle`` waits for the rest. Each
request is retried on its own inside the engine and a final failure becomes a failed row,
so a Beam bundle retry never re-sends requests that already succeeded.

In strict mode (``ignore_request_failure: false``) the first failed row makes the worker
process stop sending: rows not yet sent are recorded as failed, not sent, so a broken
endpoint costs a few requests rather than the whole dataset.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from beameval.config import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.records import GeneratedRow, InferenceInfo, InputRow, RowFailure
from beameval.core.templates import Template
from beameval.inference.engine import InferenceEngine, Outcome
from beameval.inference.targets import make_handler
from transforms import NAMESPACE
from transforms.async_calls import PendingCalls, in_global_window

__all__ = ["GenerateSamples", "passthrough_offline"]

_NOT_SENT = "not sent: the run is stopping because another row failed (strict mode)"
#: Runs (by id) whose strict-mode failure has been seen in this worker process.
_STOPPING: set[str] = set()


def passthrough_offline(row: InputRow) -> GeneratedRow:
    """Offline runs have no target: the sample is empty and metrics read the row itself."""
    return GeneratedRow(row.row_index, row.item, {}, row.raw, row.failure)


class GenerateSamples(beam.DoFn):
    """Render the prompt, call the target, and emit a GeneratedRow per input row."""

    def __init__(self, config: EvalConfig, run_id: str) -> None:
        self._config = config
        self._run_id = run_id

    def setup(self) -> None:
        config = self._config
        assert config.target is not None, "GenerateSamples needs a target"
        self._handler = make_handler(config.target, config.params, config.target.api_key())
        self._prompt = Template(config.prompt_template, "prompt_template") if config.prompt_template else None
        params = config.params
        self._engine = InferenceEngine.shared(
            self._handler, params.parallelism, params.max_retries, params.request_timeout
        )
        # Keep a few requests queued per slot so the engine never waits for the DoFn.
        self._max_pending = 2 * params.parallelism
        self._max_retries = params.max_retries
        self._strict = not params.ignore_request_failure
        self._requests = Metrics.counter(NAMESPACE, "requests")
        self._retries = Metrics.counter(NAMESPACE, "retries")
        self._generated = Metrics.counter(NAMESPACE, "rows_generated")
        self._failed = Metrics.counter(NAMESPACE, "rows_generation_failed")
        self._latency = Metrics.distribution(NAMESPACE, "latency_ms")
        self._limit_decreases = Metrics.counter(NAMESPACE, "limit_decreases")
        self._limit = Metrics.gauge(NAMESPACE, "concurrency_limit")
        self._peak_in_flight = Metrics.gauge(NAMESPACE, "peak_in_flight")
        self._failures_by_class: dict[str, Any] = {}

    def start_bundle(self) -> None:
        self._pending: PendingCalls[InputRow] = PendingCalls(self._max_pending)

    def process(self, row: InputRow) -> Iterator[GeneratedRow]:
        if row.failure is not None or row.item is None:
            yield GeneratedRow(row.row_index, row.item, {}, row.raw, row.failure)
            return
        if self._run_id in _STOPPING:
            failure = RowFailure("sample_generation", [_NOT_SENT], not_sent=True)
            yield GeneratedRow(row.row_index, row.item, {}, row.raw, failure)
            return
        try:
            rendered = self._prompt.render({**row.item, "item": row.item}) if self._prompt else row.item
            prepared = self._handler.prepare(rendered, row.item)
        except EvaluatorError as exc:
            yield self._failed_row(row, f"row {row.row_index}: {exc}")
            return
        self._pending.add(self._engine.submit(prepared, self._handler, max_retries=self._max_retries), row)
        yield from self._drain(block=self._pending.full)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for generated in self._drain(block=True, until_empty=True):
            yield in_global_window(generated)

    def _drain(self, block: bool, until_empty: bool = False) -> Iterator[GeneratedRow]:
        """Emit finished requests; wait for one when ``block``, for all when ``until_empty``."""
        for row, outcome in self._pending.drain(block, until_empty):
            yield self._generated_row(row, outcome)
        self._report_counters()

    def _generated_row(self, row: InputRow, outcome: Outcome) -> GeneratedRow:
        info = InferenceInfo(
            latency_s=outcome.latency_s,
            attempts=outcome.attempts,
            http_status=outcome.status,
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            request_hash=outcome.request_hash,
        )
        self._latency.update(int(outcome.latency_s * 1000))
        if outcome.error is not None or outcome.sample is None:
            message = str(outcome.error) if outcome.error else "no answer"  # the hint included
            return self._failed_row(row, f"row {row.row_index} failed inference: {message}", info)
        self._generated.inc()
        return GeneratedRow(row.row_index, row.item, outcome.sample, inference=info)

    def _failed_row(self, row: InputRow, message: str, info: InferenceInfo | None = None) -> GeneratedRow:
        self._failed.inc()
        if self._strict:
            _STOPPING.add(self._run_id)
        failure = RowFailure("sample_generation", [message])
        return GeneratedRow(row.row_index, row.item, {}, row.raw, failure, info)

    def _report_counters(self) -> None:
        """Copy the engine's counters and AIMD gauges into Beam metrics from the bundle's own thread."""
        counters = self._engine.snapshot_counters()
        self._requests.inc(counters.calls)
        self._retries.inc(counters.retries)
        self._limit_decreases.inc(counters.limit_decreases)
        self._limit.set(counters.limit)
        self._peak_in_flight.set(counters.peak_in_flight)
        for failure_class, count in counters.attempt_failures.items():
            if failure_class not in self._failures_by_class:
                self._failures_by_class[failure_class] = Metrics.counter(NAMESPACE, f"failures_{failure_class}")
            self._failures_by_class[failure_class].inc(count)
