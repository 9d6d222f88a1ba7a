"""Exceptions a target handler raises for a 2xx reply it cannot use, so the classifier can tell them apart."""

from __future__ import annotations

from typing import ClassVar, Literal

__all__ = [
    "EmptyAnswerError",
    "FailureClass",
    "MalformedResponseError",
    "ResponseError",
    "ResponseTooLargeError",
    "UnusableResponseError",
]

FailureClass = Literal["hard_overload", "soft_overload", "transient", "fatal"]


class ResponseError(Exception):
    """Base of the errors raised while parsing a successful (2xx) reply.

    Args:
        message: one line saying what was wrong with the reply; never holds secrets.

    """

    failure_class: ClassVar[FailureClass] = "fatal"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MalformedResponseError(ResponseError):
    """The reply lacks the expected fields (``choices``): retryable.

    Its message is the detail only ("it has no choices"); the classifier adds
    "malformed reply from <url>: ".
    """

    failure_class: ClassVar[FailureClass] = "transient"
    retryable: ClassVar[bool] = True


class EmptyAnswerError(ResponseError):
    """The model answered, but with no text and no tool calls: not retryable."""


class UnusableResponseError(ResponseError):
    """The reply is well-formed but cannot give an answer (e.g. an agent's JSONPath has no match)."""


class ResponseTooLargeError(ResponseError):
    """The reply body (after decompression) is larger than the configured cap: not retryable.

    Raised by the transport, before the body is parsed: a bigger reply is not coming
    out smaller on the next attempt, and reading on would let one reply take the worker's memory.
    """
