"""CallEndpoints: the one DoFn every endpoint call goes through (target, judge, remote metric, embeddings, reranker).

Beam's ``RunInference`` splits what knows one kind of model (its handler) from the one
transform that runs any of them. The same split here: a ``CallPlan`` knows one kind of
element: which keyed requests it needs (``Call``: the endpoint, the request as it will
be sent, its response key) and what to emit once they are answered. ``CallEndpoints``
does the rest, alike for every kind:

1. the send-time look-up: a call whose answer the run already recorded for the same
   element (an earlier attempt of a bundle Beam runs again: a later stage of the fused
   stage failed, a worker was lost) is answered from the journal, unsent;
2. a call still in flight from such an attempt is waited for, not sent again
   (``beameval.cache.in_flight``);
3. any other call goes to its endpoint's shared engine (retries, rate limits, the job's
   quota and budget) through a ``RecordingHandler``, which journals a success the moment
   it parses;
4. answers come back as they complete (``PendingCalls``), an element is emitted once all
   its calls have one, and ``finish_bundle`` waits for the rest and makes the journal
   durable before the bundle's elements move on.

Answers from the response store (``--resume``, ``cache:``) are joined before this stage
(``transforms.cache``, ``transforms.metric_cache``, ``transforms.store_join``): a plan
finds them on its element and asks only for what is missing.
"""

from __future__ import annotations

import abc
import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from beameval.cache.journal_index import row_token
from beameval.cache.recording import RecordingHandler, journal_answer
from beameval.core.crash_points import fail_once
from beameval.core.redaction import Redactor
from beameval.inference.engine import InferenceEngine
from beameval.inference.outcome import Outcome
from beameval.inference.prepared import PreparedRequest, request_hash_from_bytes, wire_bytes
from beameval.inference.targets.base import TargetHandler
from transforms import NAMESPACE
from transforms.async_calls import PendingCalls, in_global_window
from transforms.cache import journal_for
from transforms.worker_gc import freeze_startup_heap

__all__ = ["Answer", "Call", "CallEndpoints", "CallPlan", "LiveEndpoint", "Planned", "Ready"]

In = TypeVar("In")
Out = TypeVar("Out")

#: Seconds between a plan's ``report`` calls while a bundle runs.
_REPORT_EVERY_S = 0.5


@dataclasses.dataclass(frozen=True, slots=True)
class LiveEndpoint:
    """An endpoint ready to send from this worker process.

    Attributes:
        handler: builds and parses its requests.
        engine: the process's engine for it (shared by every stage that calls it).
        redactor: masks its key in what is journalled.
        max_retries: retries per request.
    """

    handler: TargetHandler
    engine: InferenceEngine
    redactor: Redactor
    max_retries: int


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One request an element needs.

    Attributes:
        name: which of the element's calls it is (its answer comes back under it).
        endpoint: where it goes.
        prepared: the request as it will be sent.
        key: its response key; None: not journalled (no journal, or the body has no JSON form).
        model: the model name journalled with its answer.
    """

    name: str
    endpoint: LiveEndpoint
    prepared: PreparedRequest
    key: str | None
    model: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """One call's outcome; ``journalled``: from the journal (an earlier attempt's call), so untimed."""

    outcome: Outcome
    journalled: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Planned(Generic[In]):
    """The calls ``element`` needs; ``finished`` gets ``element`` back with their answers."""

    element: In
    calls: Sequence[Call]


@dataclasses.dataclass(frozen=True, slots=True)
class Ready(Generic[Out]):
    """An element's output with no call to make (failed before, answered from the store, not to send)."""

    output: Out


class CallPlan(abc.ABC, Generic[In, Out]):
    """What one kind of element needs from its endpoints, and what it becomes once they answered.

    Attributes:
        counter_prefix: prefixes the stage's Beam counters (``journal_hits``).
        crash_point: names the failure tests inject once after a bundle's answers
            (``beameval.core.crash_points``); None: none.
        max_pending: calls in flight from which the stage waits for a completion before
            taking another element (set by ``setup``: a few per slot of the plan's engines,
            so they never wait for the DoFn).
    """

    counter_prefix = ""
    crash_point: str | None = None
    max_pending = 1

    @abc.abstractmethod
    def setup(self, journalled: bool) -> None:
        """Build handlers and engines on the worker; ``journalled``: the calls need response keys."""

    def token(self, element: Any) -> str:
        """The element's identity in the journal: a row's ``journal_index.row_token``."""
        return row_token(element.row_index, element.sample_index)

    @abc.abstractmethod
    def plan(self, element: In) -> Planned[Any] | Ready[Out]:
        """The calls ``element`` needs, or its output when it needs none."""

    @abc.abstractmethod
    def finished(self, element: Any, answers: Mapping[str, Answer]) -> Out:
        """The output of ``element`` (as ``plan`` returned it) once every call has an answer; never raises."""

    def report(self) -> None:
        """Copy what the engines counted into Beam metrics (from the bundle's thread, at most twice a second)."""


@dataclasses.dataclass(slots=True)
class _Waiting:
    """An element waiting for its calls."""

    element: Any
    answers: dict[str, Answer]
    remaining: int


class CallEndpoints(beam.DoFn, Generic[In, Out]):
    """Elements -> outputs, each element's calls answered from the journal or sent once.

    Args:
        plan: what the elements need and become.
        journal_dir: OUT_DIR/_responses: every success is recorded there; None records nothing.
        joined_shards: the shards the graph-time store join read: the send-time look-up skips them.
    """

    def __init__(self, plan: CallPlan[In, Out], journal_dir: str | None = None, joined_shards: Sequence[str] = ()):
        self._plan = plan
        self._journal_dir = journal_dir
        self._joined_shards = list(joined_shards)

    def setup(self) -> None:
        self._plan.setup(journalled=self._journal_dir is not None)
        self._journal = journal_for(self._journal_dir) if self._journal_dir else None
        if self._journal is not None:
            self._journal.index.ignore(self._joined_shards)
        self._journal_hits = Metrics.counter(NAMESPACE, f"{self._plan.counter_prefix}journal_hits")
        freeze_startup_heap()  # last: what setup built is long-lived too

    def start_bundle(self) -> None:
        self._pending: PendingCalls[tuple[_Waiting, str]] = PendingCalls(self._plan.max_pending)
        self._next_report = time.monotonic() + _REPORT_EVERY_S
        self._first: str | None = None  # names the bundle for the test's injected failure
        if self._journal is not None:
            self._journal.index.refresh()  # what other workers (a lost one too) recorded since the last bundle

    def process(self, element: In) -> Iterator[Out]:
        token = self._plan.token(element)
        if self._first is None:
            self._first = token
        planned = self._plan.plan(element)
        if isinstance(planned, Ready):
            yield planned.output
            return
        waiting = _Waiting(planned.element, {}, 0)
        to_send = []
        for call in planned.calls:
            answer = self._from_journal(call, token)
            if answer is None:
                to_send.append(call)
            else:
                waiting.answers[call.name] = answer
        if not to_send:
            yield self._plan.finished(waiting.element, waiting.answers)
            return
        waiting.remaining = len(to_send)
        for call in to_send:
            self._send(call, token, self._pending.add((waiting, call.name)))
        yield from self._drain(block=self._pending.full)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for output in self._drain(block=True, until_empty=True):
            yield in_global_window(output)
        self._report()
        if self._journal is not None:
            self._journal.sync()  # every answer of the bundle is durable before its elements move on
        if self._first is not None and self._plan.crash_point is not None:
            fail_once(self._plan.crash_point, self._first)  # tests: a later stage failing once

    def _from_journal(self, call: Call, token: str) -> Answer | None:
        """The call answered by its own call of an earlier attempt of the bundle, from the journal; None: send it."""
        if self._journal is None or call.key is None:
            return None
        sample = journal_answer(self._journal, call.endpoint.handler, call.key, token)
        if sample is None:
            return None
        self._journal_hits.inc()
        digest = request_hash_from_bytes(call.prepared.url, wire_bytes(call.prepared))
        return Answer(Outcome(sample, None, 200, 1, 0.0, digest), journalled=True)

    def _send(self, call: Call, token: str, done: Any) -> None:
        """Send one call, journalling its answer, unless its call from an earlier attempt is in flight here."""
        endpoint = call.endpoint
        if self._journal is None or call.key is None:  # nothing to record it under (the engine says why if unsendable)
            endpoint.engine.send(call.prepared, endpoint.handler, done, max_retries=endpoint.max_retries)
            return
        recorder = self._journal.for_row(token)
        handler = RecordingHandler(endpoint.handler, recorder, call.key, call.model, endpoint.redactor)
        self._journal.in_flight.send_once(
            call.key,
            token,
            lambda sent: endpoint.engine.send(call.prepared, handler, sent, max_retries=endpoint.max_retries),
            done,
        )

    def _drain(self, block: bool, until_empty: bool = False) -> Iterator[Out]:
        """Emit the elements whose last call finished; wait for a call when ``block``, for all when ``until_empty``."""
        for (waiting, name), outcome in self._pending.drain(block, until_empty):
            waiting.answers[name] = Answer(outcome)
            waiting.remaining -= 1
            if waiting.remaining == 0:
                yield self._plan.finished(waiting.element, waiting.answers)
        if time.monotonic() >= self._next_report:
            self._report()

    def _report(self) -> None:
        self._next_report = time.monotonic() + _REPORT_EVERY_S
        self._plan.report()
