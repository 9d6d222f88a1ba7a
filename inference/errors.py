"""Exceptions a target handler raises for a 2xx reply it cannot use, so the classifier can tell them apart."""

from __future__ import annotations

__all__ = ["EmptyAnswerError", "MalformedResponseError", "ResponseError", "UnusableResponseError"]


class ResponseError(Exception):
    """Base of the errors raised while parsing a successful (2xx) reply.

    Args:
        message: one line saying what was wrong with the reply; never holds secrets.

    """

    failure_class = "fatal"
    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MalformedResponseError(ResponseError):
    """The reply is not valid JSON or lacks the expected fields (``choices``): retryable."""

    failure_class = "transient"
    retryable = True


class EmptyAnswerError(ResponseError):
    """The model answered, but with no text and no tool calls: not retryable."""


class UnusableResponseError(ResponseError):
    """The reply is well-formed but cannot give an answer (e.g. an agent's JSONPath has no match)."""
