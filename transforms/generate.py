"""GenerateSamples: each row's request built from its rendered prompt, sent to the target by ``CallEndpoints``.

The prompt was rendered once before the graph fans out to the targets
(``transforms.render``); each target builds its own body from it here (``TargetCalls``,
the target's plan). ``transforms.endpoint_calls`` does the sending, as for every other
endpoint: the send-time journal look-up (a bundle Beam runs again pays nothing twice),
the shared engine's retries and limits, the journal. A final failure becomes a failed row.

In strict mode (``ignore_request_failure: false``) the first failed row makes the worker
process stop sending: rows not yet sent are recorded as failed, not sent, so a broken
endpoint costs a few requests rather than the whole dataset.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from apache_beam.metrics import Metrics

from beameval.cache.key import prepared_key, response_key_from_content
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.prompt import rendered_prompt
from beameval.core.records import GeneratedRow, InferenceInfo, InputRow, RowFailure
from beameval.core.redaction import Redactor
from beameval.inference.answers import answered_row
from beameval.inference.engine import InferenceEngine, Outcome
from beameval.inference.first_request import HandedReply
from beameval.inference.not_sent import STOPPING
from beameval.inference.prepared import PreparedRequest, canonical_json, wire_bytes
from beameval.inference.targets import make_handler
from transforms import NAMESPACE
from transforms.endpoint_calls import Answer, Call, CallEndpoints, CallPlan, LiveEndpoint, Planned, Ready
from transforms.guard import guarded, unexpected_failure
from transforms.row_batches import RowBatch

__all__ = ["GenerateSamples", "TargetCalls", "passthrough_offline", "repeat_row"]

_NOT_SENT = "not sent: the run is stopping because another row failed (strict mode)"
#: Runs (by id) whose strict-mode failure has been seen in this worker process.
_STOPPING: set[str] = set()


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


class TargetCalls(CallPlan[InputRow | GeneratedRow, GeneratedRow]):
    """A target's plan: each row's request built from its rendered prompt, its answer made into a GeneratedRow.

    Args:
        config: the run's (single-target) config.
        run_id: the run's id (strict-mode stop, shared rate limit).
        handed: the preflight's answer to one row's request (``pipeline.first_answer``),
            already journalled: that row is answered from it, unsent (``_handed_answer``).
    """

    crash_point = "generate-bundle-answered"

    def __init__(self, config: EvalConfig, run_id: str, handed: HandedReply | None = None) -> None:
        self._config = config
        self._run_id = run_id
        self._handed = handed
        self._handed_row = -1 if handed is None else handed.row_index  # no row_index is negative

    def setup(self, journalled: bool) -> None:
        config = self._config
        assert config.target is not None, "GenerateSamples needs a target"
        self._journalled = journalled
        self._handler = make_handler(config.target, config.params, config.target.api_key())
        # The key is masked in what is recorded and in messages; answers are scored as received (see ScoreRows).
        self._redactor = Redactor(config.target.endpoint.secret_values())
        # Builds the key's request once the handler has learned to rename max_tokens (see _keyed).
        model = config.target.model
        self._key_handler = make_handler(config.target, config.params, None)
        self._model_name = model.name if model is not None else None
        params = config.params
        heard = None if self._handed is None else self._handed.limits  # the preflight's: no lone first request
        self._engine = InferenceEngine.for_endpoint(self._handler, config.target.endpoint, params, self._run_id, heard)
        self._endpoint = LiveEndpoint(self._handler, self._engine, self._redactor, params.max_retries)
        # Keep a few requests queued per slot so the engine never waits for the DoFn.
        self.max_pending = 2 * params.parallelism
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

    def plan(self, row: InputRow | GeneratedRow) -> Planned[InputRow] | Ready[GeneratedRow]:
        if isinstance(row, GeneratedRow):  # answered from the response store (transforms.cache)
            return Ready(row)
        if row.failure is not None or row.item is None:
            return Ready(GeneratedRow(row.row_index, row.item, {}, row.raw, row.failure, sample_index=row.sample_index))
        if row.row_index == self._handed_row:  # the one comparison every row pays for the preflight's answer
            handed = self._handed_answer(row)
            if handed is not None:
                return Ready(handed)
        if self._run_id in _STOPPING:
            failure = RowFailure("sample_generation", [_NOT_SENT], not_sent=True)
            return Ready(GeneratedRow(row.row_index, row.item, {}, row.raw, failure, sample_index=row.sample_index))
        try:
            rendered = rendered_prompt(row)
            prepared = self._handler.prepare(rendered, row.item)
            learned = self._handler.learned  # read after prepare (a one-way switch): see _keyed
            if row.sample_index:  # the sample index is part of the response key (caches keep samples apart)
                prepared = dataclasses.replace(prepared, sample_index=row.sample_index)
        except EvaluatorError as exc:
            return Ready(self._failed_row(row, f"row {row.row_index}: {exc}"))
        except Exception as exc:  # noqa: BLE001 - a handler bug fails its row, not the bundle
            return Ready(
                self._failed_row(row, unexpected_failure("GenerateSamples", "sample_generation", row.row_index, exc))
            )
        key = None
        if self._journalled:
            prepared, key = self._keyed(rendered, row, prepared, learned)
        row = dataclasses.replace(row, request=_request_text(prepared))  # the rows/ column (the transcript)
        return Planned(row, [Call("", self._endpoint, prepared, key, self._model_name)])

    def finished(self, row: InputRow, answers: Mapping[str, Answer]) -> GeneratedRow:
        """The row its answer makes; one from the journal counts as a request of this run, untimed.

        The attempt that sent a journalled answer was thrown away with its bundle, so no
        other row carries its cost.
        """
        answer = answers[""]
        return self._answered(row, answer.outcome, timed=not answer.journalled)

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

    def report(self) -> None:
        """Copy the engine's counters and AIMD gauges into Beam metrics.

        ``CallEndpoints`` calls it at most twice a second while a bundle runs and once at
        its end: taking the engine's snapshot for every row cost 8% of the bundle thread's time.
        """
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


class GenerateSamples(CallEndpoints[InputRow | GeneratedRow, GeneratedRow]):
    """InputRow -> GeneratedRow: the target's calls, through the one endpoint-call stage.

    Args:
        config: the run's (single-target) config.
        run_id: the run's id (strict-mode stop, shared rate limit).
        journal_dir: OUT_DIR/_responses: every success is recorded there.
        handed: the preflight's answer to one row's request (``TargetCalls``).
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
        super().__init__(TargetCalls(config, run_id, handed), journal_dir, joined_shards)


def _request_text(prepared: PreparedRequest) -> str | None:
    """The body as sent, as text for the ``request`` column; None when it has no JSON form (the engine says why)."""
    try:
        return wire_bytes(prepared).decode("utf-8")
    except (TypeError, ValueError):
        return None
