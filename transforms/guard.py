"""The last line of defence of every per-row DoFn: an unexpected exception fails its row, not the bundle.

A bundle that raises is retried by Beam and then fails the whole run, after every
request has been paid for, and nothing is written. Expected failures (a template
error, an endpoint error) are handled where they happen; anything else a row can
trigger (a bug, a value no writer accepts) goes through ``guarded``, which logs it,
counts it (``unexpected_row_errors``) and returns the caller's failed-row value instead,
with the phase and the cause in its message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from apache_beam.metrics import Metrics

from beameval.core.records import Phase, RowFailure
from transforms import NAMESPACE

__all__ = ["guarded", "unexpected_failure"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_MESSAGE_CHARS = 300


def unexpected_failure(step: str, phase: Phase, row_index: int | None, exc: BaseException) -> RowFailure:
    """The row failure recording an unexpected exception in ``step`` (phase, cause, and what to do)."""
    text = " ".join(str(exc).split())
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + "…"
    where = f"row {row_index}: " if row_index is not None else ""
    cause = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return RowFailure(
        phase,
        [f"{where}{step} failed unexpectedly ({cause}); the row was recorded as failed so the run could go on"],
    )


def guarded(
    step: str,
    phase: Phase,
    row_index: int | None,
    attempt: Callable[[], T],
    fallback: Callable[[RowFailure], T],
) -> T:
    """Return ``attempt()``, or ``fallback(failure)`` when it raises an Exception (KeyboardInterrupt passes).

    Args:
        step: the stage's name for messages (``ScoreRows``, ``WriteRows``).
        phase: the phase the failed row is recorded under.
        row_index: the row's position, for the message and the log.
        attempt: the per-row work.
        fallback: builds the stage's failed-row value from the failure.

    Returns:
        What ``attempt`` returned, or the failed-row value.
    """
    try:
        return attempt()
    except Exception as exc:  # noqa: BLE001 - the point: one row's bug must not fail the bundle
        log.warning("%s: row %s failed unexpectedly", step, row_index, exc_info=True)
        Metrics.counter(NAMESPACE, "unexpected_row_errors").inc()
        return fallback(unexpected_failure(step, phase, row_index, exc))
