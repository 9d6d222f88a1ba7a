"""Engine-wide request counters, read as deltas from another thread so the Beam DoFn can report them as Metrics."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from beameval.inference.outcome import Outcome

__all__ = ["CounterSnapshot", "EngineCounters"]

MAX_LATENCIES = 100_000


@dataclass
class CounterSnapshot:
    """Counts since the previous snapshot, plus the limiter's current state.

    Attributes:
        calls: requests finished (success or final failure).
        attempts: HTTP attempts sent.
        retries: attempts beyond the first (``attempts - calls`` for finished calls).
        successes: calls that produced a sample.
        failures: calls that ended in an error.
        attempt_failures: failed attempts by class (``hard_overload``, ``soft_overload``,
            ``transient``, ``fatal``), retried or not.
        final_failures: failed calls by the class of their last failure.
        latencies_s: per finished call, ``Outcome.latency_s`` (at most 100,000 per snapshot;
            ``latencies_dropped`` counts the rest).
        latencies_dropped: latencies not kept because of that cap.
        prompt_tokens: summed usage.
        completion_tokens: summed usage.
        limit_decreases: times the adaptive limit was cut since the last snapshot.
        limit: the adaptive limit now (a gauge).
        in_flight: requests in flight now (a gauge).
        peak_in_flight: the most requests ever in flight at once (a gauge).

    """

    calls: int = 0
    attempts: int = 0
    retries: int = 0
    successes: int = 0
    failures: int = 0
    attempt_failures: dict[str, int] = field(default_factory=dict)
    final_failures: dict[str, int] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)
    latencies_dropped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    limit_decreases: int = 0
    limit: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0


class EngineCounters:
    """Accumulates outcomes on the event-loop thread; ``take()`` swaps them out from any thread."""

    __slots__ = ("_current", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current = CounterSnapshot()

    def add(self, outcome: Outcome) -> None:
        """Count one finished call."""
        with self._lock:
            current = self._current
            current.calls += 1
            current.attempts += outcome.attempts
            if outcome.attempts > 1:
                current.retries += outcome.attempts - 1
            for kind in outcome.failure_classes:
                current.attempt_failures[kind] = current.attempt_failures.get(kind, 0) + 1
            if outcome.error is None:
                current.successes += 1
            else:
                current.failures += 1
                kind = outcome.error.failure_class or "fatal"
                current.final_failures[kind] = current.final_failures.get(kind, 0) + 1
            if len(current.latencies_s) < MAX_LATENCIES:
                current.latencies_s.append(outcome.latency_s)
            else:
                current.latencies_dropped += 1
            if outcome.prompt_tokens:
                current.prompt_tokens += outcome.prompt_tokens
            if outcome.completion_tokens:
                current.completion_tokens += outcome.completion_tokens

    def take(self) -> CounterSnapshot:
        """Return the counts gathered so far and start again from zero."""
        with self._lock:
            snapshot, self._current = self._current, CounterSnapshot()
        return snapshot
