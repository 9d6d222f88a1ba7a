"""Bookkeeping for DoFns that hand requests to the shared inference engine and emit results as they complete.

The engine finishes requests on its own event-loop thread; Beam wants elements emitted
from the bundle's thread. ``PendingCalls`` bridges the two: each call's completion
callback (``InferenceEngine.send``) puts ``(tag, outcome)`` on a queue that the DoFn
drains from ``process`` (without blocking, or blocking while too many calls are pending)
and from ``finish_bundle`` (until every call of the bundle has completed). Used by
``transforms.endpoint_calls.CallEndpoints``, the one stage that sends endpoint calls.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from beameval.inference.engine import Done
from beameval.inference.outcome import Outcome

__all__ = ["PendingCalls", "in_global_window"]

Tag = TypeVar("Tag")


class PendingCalls(Generic[Tag]):
    """The calls a bundle has in flight, each with a caller-chosen tag.

    Args:
        max_pending: ``full`` is true from this many calls in flight on.
    """

    def __init__(self, max_pending: int) -> None:
        self.max_pending = max(1, max_pending)
        self._done: queue.SimpleQueue[tuple[Tag, Outcome]] = queue.SimpleQueue()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Calls added and not yet drained."""
        return self._in_flight

    @property
    def full(self) -> bool:
        """True when the caller should wait for a completion before adding more."""
        return self._in_flight >= self.max_pending

    def add(self, tag: Tag) -> Done:
        """Track one call; pass what this returns as the call's ``done`` (``tag`` comes back with its outcome)."""
        self._in_flight += 1
        put = self._done.put

        def done(outcome: Outcome) -> None:
            put((tag, outcome))

        return done

    def drain(self, block: bool = False, until_empty: bool = False) -> Iterator[tuple[Tag, Outcome]]:
        """Yield completed calls: those already done; with ``block`` at least one; with ``until_empty`` all."""
        while self._in_flight:
            try:
                tag, outcome = self._done.get(block=block or until_empty)
            except queue.Empty:
                return
            self._in_flight -= 1
            block = False
            yield tag, outcome


def in_global_window(value: Any) -> WindowedValue:
    """Wrap an element emitted from ``finish_bundle`` (which must give windowed values)."""
    return WindowedValue(value, GlobalWindow().max_timestamp(), (GlobalWindow(),))
