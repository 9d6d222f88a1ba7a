"""GenerateSamples: build each row's request from its rendered prompt and call the target through the shared engine.

The prompt was rendered once before the graph fans out to the targets
(``transforms.render``); each target builds its own body from it here.

The DoFn hands requests to the worker process's ``InferenceEngine`` (one event loop, one
connection pool and one concurrency limit per process, shared by every DoFn instance and
thread) and emits results as they complete; ``finish_bundle`` waits for the rest. Each
request is retried on its own inside the engine and a final failure becomes a failed row.

A request is looked up in the run's journal just before it is sent (``JournalWriter.answered``,
``beameval.cache.journal_index``): when Beam runs a bundle again (a later stage of the
fused stage failed, a worker was lost), rows whose answers were recorded are answered from
the journal, unsent, and a request still in flight from the first attempt is waited for,
not sent again (``beameval.cache.in_flight``).

In strict mode (``ignore_request_failure: false``) the first failed row makes the worker
process stop sending: rows not yet sent are recorded as failed, not sent, so a broken
endpoint costs a few requests rather than the whole dataset.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from beameval.cache.journal_index import row_token
from beameval.cache.key import prepared_key, response_key_from_content
from beameval.cache.recording import RecordingHandler, journal_answer
from beameval.config.schema import EvalConfig
from beameval.core.crash_points import fail_once
from beameval.core.errors import EvaluatorError
from beameval.core.prompt import rendered_prompt
from beameval.core.records import GeneratedRow, InferenceInfo, InputRow, RowFailure
from beameval.core.redaction import Redactor
from beameval.inference.answers import answered_row
from beameval.inference.engine import InferenceEngine, Outcome
from beameval.inference.first_request import HandedReply
from beameval.inference.not_sent import STOPPING
from beameval.inference.prepared import PreparedRequest, canonical_json, request_hash_from_bytes, wire_bytes
from beameval.inference.targets import make_handler
from transforms import NAMESPACE
from transforms.async_calls import PendingCalls, in_global_window
from transforms.cache import journal_for
from transforms.guard import guarded, unexpected_failure
from transforms.row_batches import RowBatch
from transforms.worker_gc import freeze_startup_heap

__all__ = ["GenerateSamples", "passthrough_offline", "repeat_row"]

_NOT_SENT = "not sent: the run is stopping because another row failed (strict mode)"
#: Runs (by id) whose strict-mode failure has been seen in this worker process.
_STOPPING: set[str] = set()
#: Seconds between copies of the engine's counters into Beam metrics while a bundle runs.
_REPORT_EVERY_S = 0.5


def passthrough_offline(row: InputRow) -> GeneratedRow:
    """Offline runs have no target: the sample is empty and metrics read the row itself."""
    return GeneratedRow(
        row.row_index, row.item, {}, row.raw, row.failure, sample_index=row.sample_index, notes=row.notes
    )


def repeat_row(element: InputRow | list[InputRow], repeats: int) -> Iterator[InputRow | list[InputRow]]:
    """``params.repeats``: the row once per sample, ``sample_index`` 0..repeats-1 (failed rows too: counts add up).

    A batch of rows (``transforms.row_batches``) gives one batch of every row's samples.
    """
    if isinstance(element, list):
        yield RowBatch(dataclasses.replace(row, sample_index=index) for row in element for index in range(repeats))
        return
    for index in range(repeats):
        yield dataclasses.replace(element, sample_index=index)


class GenerateSamples(beam.DoFn):
    """Build the request from the rendered prompt, call the target, and emit a GeneratedRow per input row.

    Args:
        config: the run's (single-target) config.
        run_id: the run's id (strict-mode stop, shared rate limit).
        journal_dir: OUT_DIR/_responses: every success is recorded there.
        handed: the preflight's answer to one row's request (``pipeline.first_answer``),
            already journalled: that row is answered from it, unsent (``_handed_answer``).
        joined_shards: the shards the graph-time join read (``--resume``, ``cache:``): the
            send-time look-up skips them.
    """

    def __init__(
        self,
        config: EvalConfig,
        run_id: str,
        journal_dir: str | None = None,
        handed: HandedReply | None = None,
        joined_shards: Sequence[str] = (),
    ) -> None:
        self._config = config
        self._run_id = run_id
        self._journal_dir = journal_dir
        self._handed = handed
        self._joined_shards = list(joined_shards)
        self._handed_row = -1 if handed is None else handed.row_index  # no row_index is negative

    def setup(self) -> None:
        config = self._config
        assert config.target is not None, "GenerateSamples needs a target"
        self._handler = make_handler(config.target, config.params, config.target.api_key())
        # The key is masked in what is recorded and in messages; answers are scored as received (see ScoreRows).
        self._redactor = Redactor(config.target.endpoint.secret_values())
        self._journal = journal_for(self._journal_dir) if self._journal_dir else None
        if self._journal is not None:
            self._journal.index.ignore(self._joined_shards)
        # Builds the key's request once the handler has learned to rename max_tokens (see _recording).
        model = config.target.model
        self._key_handler = make_handler(config.target, config.params, None)
        self._model_name = model.name if model is not None else None
        params = config.params
        heard = None if self._handed is None else self._handed.limits  # the preflight's: no lone first request
        self._engine = InferenceEngine.for_endpoint(self._handler, config.target.endpoint, params, self._run_id, heard)
        # Keep a few requests queued per slot so the engine never waits for the DoFn.
        self._max_pending = 2 * params.parallelism
        self._max_retries = params.max_retries
        self._strict = not params.ignore_request_failure
        self._requests = Metrics.counter(NAMESPACE, "requests")
        self._retries = Metrics.counter(NAMESPACE, "retries")
        self._generated = Metrics.counter(NAMESPACE, "rows_generated")
        self._journal_hits = Metrics.counter(NAMESPACE, "journal_hits")
        self._failed = Metrics.counter(NAMESPACE, "rows_generation_failed")
        self._latency = Metrics.distribution(NAMESPACE, "latency_ms")
        self._limit_decreases = Metrics.counter(NAMESPACE, "limit_decreases")
        self._limit = Metrics.gauge(NAMESPACE, "concurrency_limit")
        self._peak_in_flight = Metrics.gauge(NAMESPACE, "peak_in_flight")
        self._failures_by_class: dict[str, Any] = {}
        freeze_startup_heap()  # last: what setup built is long-lived too

    def start_bundle(self) -> None:
        self._pending: PendingCalls[InputRow] = PendingCalls(self._max_pending)
        self._next_report = time.monotonic() + _REPORT_EVERY_S
        self._first_row: str | None = None  # names the bundle for the test's injected failure
        if self._journal is not None:
            self._journal.index.refresh()  # what other workers (a lost one too) recorded since the last bundle

    def process(self, row: InputRow | GeneratedRow) -> Iterator[GeneratedRow]:
        if self._first_row is None:
            self._first_row = row_token(row.row_index, row.sample_index)
        if isinstance(row, GeneratedRow):  # answered from the response store (transforms.cache)
            yield row
            return
        if row.failure is not None or row.item is None:
            yield GeneratedRow(row.row_index, row.item, {}, row.raw, row.failure, sample_index=row.sample_index)
            return
        if row.row_index == self._handed_row:  # the one comparison every row pays for the preflight's answer
            handed = self._handed_answer(row)
            if handed is not None:
                yield handed
                return
        if self._run_id in _STOPPING:
            failure = RowFailure("sample_generation", [_NOT_SENT], not_sent=True)
            yield GeneratedRow(row.row_index, row.item, {}, row.raw, failure, sample_index=row.sample_index)
            return
        try:
            rendered = rendered_prompt(row)
            prepared = self._handler.prepare(rendered, row.item)
            learned = self._handler.learned  # read after prepare (a one-way switch): see _recording
            if row.sample_index:  # the sample index is part of the response key (caches keep samples apart)
                prepared = dataclasses.replace(prepared, sample_index=row.sample_index)
        except EvaluatorError as exc:
            yield self._failed_row(row, f"row {row.row_index}: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - a handler bug fails its row, not the bundle
            yield self._failed_row(row, unexpected_failure("GenerateSamples", "sample_generation", row.row_index, exc))
            return
        key = None
        if self._journal is not None:
            prepared, key = self._keyed(rendered, row, prepared, learned)
        row = dataclasses.replace(row, request=_request_text(prepared))  # the rows/ column (the transcript)
        if key is None:  # no journal, or not sendable either (the engine reports why)
            self._engine.send(prepared, self._handler, self._pending.add(row), max_retries=self._max_retries)
        else:
            answered = self._from_journal(row, prepared, key)
            if answered is not None:
                yield answered
                return
            self._send(row, prepared, key)
        yield from self._drain(block=self._pending.full)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for generated in self._drain(block=True, until_empty=True):
            yield in_global_window(generated)
        self._report_counters()
        if self._journal is not None:
            self._journal.sync()  # every response of the bundle's rows is durable before they move on
        if self._first_row is not None:
            fail_once("generate-bundle-answered", self._first_row)  # tests: a later stage failing once

    def _from_journal(self, row: InputRow, prepared: PreparedRequest, key: str) -> GeneratedRow | None:
        """The row answered by its own call of an earlier attempt of its bundle, from the journal; None: send it.

        It counts as one of the run's requests (untimed): the attempt that sent it was
        thrown away with its bundle, so no other row carries its cost.
        """
        assert self._journal is not None
        sample = journal_answer(self._journal, self._handler, key, row_token(row.row_index, row.sample_index))
        if sample is None:
            return None
        self._journal_hits.inc()
        digest = request_hash_from_bytes(prepared.url, wire_bytes(prepared))
        return self._answered(row, Outcome(sample, None, 200, 1, 0.0, digest), timed=False)

    def _send(self, row: InputRow, prepared: PreparedRequest, key: str) -> None:
        """Send the row's request, recording its answer, unless its call from an earlier attempt is in flight here."""
        assert self._journal is not None
        token = row_token(row.row_index, row.sample_index)
        handler = RecordingHandler(self._handler, self._journal.for_row(token), key, self._model_name, self._redactor)
        self._journal.in_flight.send_once(
            key,
            token,
            lambda done: self._engine.send(prepared, handler, done, max_retries=self._max_retries),
            self._pending.add(row),
        )

    def _keyed(
        self, rendered: Any, row: InputRow, prepared: PreparedRequest, learned: bool
    ) -> tuple[PreparedRequest, str | None]:
        """The request with its wire bytes, and its response key (None when the body has no JSON form).

        Responses are keyed by the request as first built: once the handler has learned
        to rename ``max_tokens`` (``ModelHandler.revise``; ``learned``, read after
        ``prepare``, says it may have) a never-sending twin builds the key's request.
        """
        try:
            content = canonical_json(prepared.body)  # serialised once: keyed here, sent as it is
            prepared = dataclasses.replace(prepared, content=content)
            if learned:
                return prepared, prepared_key(self._key_handler.prepare(rendered, row.item), row.sample_index)
            key = response_key_from_content(
                prepared.url, content, row.sample_index, prepared.headers, self._handler.secrets
            )
        except (EvaluatorError, TypeError, ValueError):
            return prepared, None
        return prepared, key

    def _handed_answer(self, row: InputRow) -> GeneratedRow | None:
        """Row ``row`` answered from the preflight's reply, unsent; None when that reply is not its answer.

        Only sample 0 of the row the preflight built its request from, and only if the request
        built here has the preflight's response key; any other row (another sample, the same
        request from another row, a config the workers see differently) is sent as usual. The
        reply is already in the journal (``pipeline.first_answer.hand_off``), so it is not
        recorded again: a second copy would count twice in ``pipeline.cache stats`` and in
        the store it is published to. The row takes a fresh reply's path (``_generated_row``)
        and counts as one request of this run, with the preflight's attempts.
        """
        handed = self._handed
        assert handed is not None
        if row.sample_index != 0:
            return None
        try:
            rendered = rendered_prompt(row)
            prepared = self._handler.prepare(rendered, row.item)
            prepared, key = self._keyed(rendered, row, prepared, self._handler.learned)
        except Exception:  # noqa: BLE001 - the usual path fails the row, saying why
            return None
        if key != handed.key:
            return None
        self._requests.inc()
        self._retries.inc(max(handed.outcome.attempts - 1, 0))
        row = dataclasses.replace(row, request=_request_text(prepared))  # the rows/ column, as when sent
        return self._answered(row, handed.outcome)

    def _drain(self, block: bool, until_empty: bool = False) -> Iterator[GeneratedRow]:
        """Emit finished requests; wait for one when ``block``, for all when ``until_empty``."""
        for row, outcome in self._pending.drain(block, until_empty):
            yield self._answered(row, outcome)
        if time.monotonic() >= self._next_report:
            self._report_counters()

    def _answered(self, row: InputRow, outcome: Outcome, timed: bool = True) -> GeneratedRow:
        """The row ``outcome`` makes; a bug in making it fails the row, not the bundle.

        ``timed``: the outcome's latency is this call's (not for an answer from the journal).
        """
        return guarded(
            "GenerateSamples",
            "sample_generation",
            row.row_index,
            functools.partial(self._generated_row, row, outcome, timed),
            functools.partial(self._failed_row, row),
        )

    def _generated_row(self, row: InputRow, outcome: Outcome, timed: bool = True) -> GeneratedRow:
        info = InferenceInfo(
            latency_s=outcome.latency_s if timed else None,
            attempts=outcome.attempts,
            http_status=outcome.status,
            request_hash=outcome.request_hash,
            request=row.request,
        )
        if timed:
            self._latency.update(int(outcome.latency_s * 1000))
        if outcome.error is not None and outcome.error.failure_class in STOPPING:  # never sent: skipped
            Metrics.counter(NAMESPACE, f"rows_skipped_{outcome.error.failure_class}").inc()  # why the run stopped
            skipped = RowFailure("sample_generation", [str(outcome.error)], skipped=True)
            return GeneratedRow(
                row.row_index, row.item, {}, row.raw, skipped, info, sample_index=row.sample_index, notes=row.notes
            )
        if outcome.error is not None or outcome.sample is None:
            message = str(outcome.error) if outcome.error else "no answer"  # the hint included
            return self._failed_row(row, f"row {row.row_index} failed inference: {message}", info)
        generated = answered_row(row, outcome.sample, info)  # the path stored answers take too
        if generated.failure is not None:
            return self._failed_row(row, generated.failure, info)
        self._generated.inc()
        return generated

    def _failed_row(self, row: InputRow, message: str | RowFailure, info: InferenceInfo | None = None) -> GeneratedRow:
        self._failed.inc()
        if self._strict:
            _STOPPING.add(self._run_id)
        text = message.text if isinstance(message, RowFailure) else message
        failure = RowFailure("sample_generation", [self._redactor.text(text)])
        return GeneratedRow(
            row.row_index, row.item, {}, row.raw, failure, info, sample_index=row.sample_index, notes=row.notes
        )

    def _report_counters(self) -> None:
        """Copy the engine's counters and AIMD gauges into Beam metrics from the bundle's own thread.

        Called at most every ``_REPORT_EVERY_S`` while the bundle runs and once at its end:
        taking the engine's snapshot for every row cost 8% of the bundle thread's time.
        """
        self._next_report = time.monotonic() + _REPORT_EVERY_S
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


def _request_text(prepared: PreparedRequest) -> str | None:
    """The body as sent, as text for the ``request`` column; None when it has no JSON form (the engine says why)."""
    try:
        return wire_bytes(prepared).decode("utf-8")
    except (TypeError, ValueError):
        return None
