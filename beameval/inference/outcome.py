"""The result of one request after retries, so callers get a value instead of an exception."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from beameval.core.errors import EndpointError

__all__ = ["Outcome"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one request.

    Exactly one of ``sample`` and ``error`` is set.

    Attributes:
        sample: the parsed sample (``output_text``, ``response``, …) on success.
        error: the final failure (message with cause and HTTP status, ``failure_class``,
            ``attempts``); never holds API keys.
        status: the HTTP status of the last attempt; None when it got no response.
        attempts: HTTP attempts made (0 when the request could not even be built).
        latency_s: seconds from the start of the first attempt to the final answer,
            back-off waits included.
        request_hash: ``request_hash(prepared)``; "" when the body could not be serialised.
        prompt_tokens: from the reply's ``usage``, when reported.
        completion_tokens: from the reply's ``usage``, when reported.
        failure_classes: the class of each failed attempt, in order (empty on a clean success).

    """

    sample: dict[str, Any] | None
    error: EndpointError | None
    status: int | None
    attempts: int
    latency_s: float
    request_hash: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    failure_classes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the request produced a sample."""
        return self.error is None
