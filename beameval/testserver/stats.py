"""Request counters of the test server, so tests can assert what a client actually did."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

__all__ = ["Stats"]


class Stats:
    """Counts inference requests (chat, completions, agent); control calls are not counted.

    ``connections`` counts every accepted TCP connection, control ones included.

    ``in_flight`` counts requests admitted past the capacity gate, from the moment
    their body is read until their answer is handed to the socket, so it includes
    latency and stall sleeps; requests rejected with 429 for capacity are counted
    in ``requests`` and ``by_status`` but never in flight. ``peak_in_flight`` is its
    exact maximum (the server is single-threaded).

    ``first_request_at`` and ``last_response_at`` are the server's wall-clock times
    (``time.time()``) of the first inference request and of the last inference answer
    since the last reset (None before any), so a benchmark can measure the window in
    which the endpoint was busy without the client's start-up; ``busy_s`` is their
    difference. ``in_flight_s`` is the integral of ``in_flight`` over time (request-seconds
    spent inside the server since the reset): over ``busy_s`` it is the mean number of
    requests the client kept at the endpoint, over ``requests`` the time each spent there.
    ``second_request_at`` is the second inference request's arrival: a client that sends
    one request alone before its run starts (the evaluator's preflight, then seconds of
    Beam start-up) is measured from there.

    ``not_found`` counts the requests for a route the server does not have, by
    ``"METHOD /path"`` (a client POSTing to a wrong path shows there, not in ``requests``).
    """

    def __init__(self) -> None:
        self.in_flight = 0  # the one counter reset() keeps
        self.reset()

    def reset(self) -> None:
        """Zero the counters; requests still in flight stay counted."""
        self.requests = 0
        self.connections = 0
        self.by_status: Counter[str] = Counter()
        self.per_prompt: Counter[str] = Counter()
        self.not_found: Counter[str] = Counter()
        self.peak_in_flight = self.in_flight
        self.last_request: dict[str, Any] | None = None
        self.first_request_at: float | None = None
        self.second_request_at: float | None = None
        self.last_response_at: float | None = None
        self.in_flight_s = 0.0
        self._changed_at = time.monotonic()

    def connected(self) -> None:
        """Count an accepted TCP connection (keep-alive reuse shows as few connections)."""
        self.connections += 1

    def arrived(self, prompt: str, record: dict[str, Any]) -> None:
        """Count an inference request and remember it as the last one."""
        if self.first_request_at is None:
            self.first_request_at = time.time()
        elif self.second_request_at is None:
            self.second_request_at = time.time()
        self.requests += 1
        self.per_prompt[prompt] += 1
        self.last_request = record

    def missed(self, method: str, path: str) -> None:
        """Count a request for a route the server does not have."""
        self.not_found[f"{method} {path}"] += 1

    def enter(self) -> None:
        """Mark a request admitted (now in flight)."""
        self._accumulate()
        self.in_flight += 1
        if self.in_flight > self.peak_in_flight:
            self.peak_in_flight = self.in_flight

    def leave(self) -> None:
        """Mark an admitted request answered (or abandoned)."""
        self._accumulate()
        self.in_flight -= 1

    def _accumulate(self) -> None:
        now = time.monotonic()
        self.in_flight_s += self.in_flight * (now - self._changed_at)
        self._changed_at = now

    def answered(self, status: int | str) -> None:
        """Count the outcome: an HTTP status, or ``"reset"`` for a dropped connection."""
        self.by_status[str(status)] += 1
        self.last_response_at = time.time()

    def snapshot(self) -> dict[str, Any]:
        """The JSON answer of ``GET /_stats``."""
        return {
            "requests": self.requests,
            "connections": self.connections,
            "by_status": dict(self.by_status),
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "in_flight_s": self.in_flight_s,
            "per_prompt": dict(self.per_prompt),
            "not_found": dict(self.not_found),
            "first_request_at": self.first_request_at,
            "second_request_at": self.second_request_at,
            "last_response_at": self.last_response_at,
            "busy_s": (
                None
                if self.first_request_at is None or self.last_response_at is None
                else self.last_response_at - self.first_request_at
            ),
        }
