"""One request per key in flight in a process: a retried bundle waits for the call its first attempt made.

When a later stage fails while a bundle's requests are still on their way, Beam runs the
bundle again at once, often in the same process; the first attempt's calls go on in the
shared engine and are journalled when they are answered. The retry's rows find their keys
here and wait for those calls instead of sending them again (the journal look-up,
``journal_index``, covers calls that had already been answered).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["InFlight"]

Done = Callable[[Any], None]


@dataclass(slots=True)
class _Call:
    row: str
    waiters: list[Done] = field(default_factory=list)


class InFlight:
    """The calls a process has sent and not seen finish, by response key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, _Call] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def send_once(self, key: str, row: str, send: Callable[[Done], None], waiter: Callable[[bool], Done]) -> bool:
        """Send the call of ``key`` for ``row`` unless one is in flight; either way its outcome reaches ``waiter``.

        Args:
            key: the request's response key.
            row: the asking row (``journal_index.row_token``).
            send: sends the request, calling its argument with the outcome.
            waiter: given whether another row's call answers this one (a duplicate of the
                request, as opposed to this row's own earlier attempt), returns the
                callback that receives the outcome.

        Returns:
            True when this call sent the request.

        """
        with self._lock:
            call = self._calls.get(key)
            first = call is None
            if call is None:
                call = self._calls[key] = _Call(row)
            call.waiters.append(waiter(call.row != row))
        if first:
            send(lambda outcome: self._finish(key, outcome))
        return first

    def _finish(self, key: str, outcome: Any) -> None:
        with self._lock:
            call = self._calls.pop(key)
        for done in call.waiters:
            done(outcome)
