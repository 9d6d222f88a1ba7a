"""One call per request and row in flight in a process: a retried bundle waits for its first attempt's call.

When a later stage fails while a bundle's requests are still on their way, Beam runs the
bundle again at once, often in the same process; the first attempt's calls go on in the
shared engine and are journalled when they are answered. The retry's rows find their
calls here (by response key and row, as the journal look-up does) and wait for them
instead of sending them again; ``journal_index`` covers calls that had already been
answered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["InFlight"]

Done = Callable[[Any], None]


class InFlight:
    """The calls a process has sent and not seen finish, by ``(response key, row)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], list[Done]] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def send_once(self, key: str, row: str, send: Callable[[Done], None], done: Done) -> bool:
        """Send the call of ``key`` for ``row`` unless it is in flight; either way its outcome reaches ``done``.

        Args:
            key: the request's response key.
            row: the asking row (``journal_index.row_token``).
            send: sends the request, calling its argument with the outcome.
            done: receives the outcome.

        Returns:
            True when this call sent the request.

        """
        call = (key, row)
        with self._lock:
            waiters = self._calls.get(call)
            first = waiters is None
            if waiters is None:
                waiters = self._calls[call] = []
            waiters.append(done)
        if first:
            send(lambda outcome: self._finish(call, outcome))
        return first

    def _finish(self, call: tuple[str, str], outcome: Any) -> None:
        with self._lock:
            waiters = self._calls.pop(call)
        for done in waiters:
            done(outcome)
