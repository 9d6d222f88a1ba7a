"""The evaluator's exception tree; foreign exceptions are translated into it at the edges.

    EvaluatorError                 root: a message meant for the user, never a traceback
    ├── ConfigError                the config file or command line is invalid
    ├── DatasetError               the dataset cannot be found, listed or parsed
    ├── TemplateError              a Jinja template failed to compile or render
    ├── EndpointError              a model, agent or judge endpoint failed (after retries)
    ├── MetricError                a metric could not score a row
    └── OutputError                the output directory cannot be written

Row-level failures (template, endpoint, metric) are turned into error records by the
pipeline; only run-level failures reach the command line.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DatasetError",
    "EndpointError",
    "EvaluatorError",
    "MetricError",
    "OutputError",
    "TemplateBudgetError",
    "TemplateError",
]


class EvaluatorError(Exception):
    """Base of every error the evaluator reports to a user.

    Args:
        message: one paragraph saying what failed, where, and what to do.
        hint: an optional remedy appended to the message.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message}{_sentence_end(message)} {hint}" if hint else message)


class ConfigError(EvaluatorError):
    """The config file or a command-line flag is invalid."""


class DatasetError(EvaluatorError):
    """The dataset cannot be found, listed or parsed."""


class TemplateError(EvaluatorError):
    """A template failed to compile, or to render against a row."""


class TemplateBudgetError(TemplateError):
    """A template ran past its rendering budget or recursed without end: the template's fault, whatever the row."""


class EndpointError(EvaluatorError):
    """A request to an endpoint failed for good (non-retryable, or retries exhausted).

    Args:
        message: the one-line cause, already free of secrets.
        status: the last HTTP status seen, when there was a response.
        failure_class: the classifier's name for the last failure (``hard_overload``, …).
        attempts: how many attempts were made.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        failure_class: str | None = None,
        attempts: int = 1,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.failure_class = failure_class
        self.attempts = attempts


class MetricError(EvaluatorError):
    """A metric could not score a row (bad operand type, missing candidate, …)."""


class OutputError(EvaluatorError):
    """The output location cannot be created or written."""


def _sentence_end(message: str) -> str:
    """A full stop between a message and its hint, so a hint never reads as part of a URL or value."""
    return "" if message.rstrip().endswith((".", "!", "?")) else "."
