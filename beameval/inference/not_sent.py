"""Why the pacer refused to send an attempt: the retry loop turns each into the request's outcome, unsent.

``BudgetExhausted`` (``budget``) is the third such refusal; it lives with the budget.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["STOPPING", "NotSent", "PacingTooLong", "QuotaStoreLost"]

#: Failure classes of requests never sent because the run is stopping (its budget, its shared Redis):
#: their rows are ``skipped``, not failed, and ``--resume`` sends them.
STOPPING = ("budget", "quota_store")


class NotSent(Exception):
    """An attempt the pacer would not let go; ``failure_class`` names the outcome, ``hint`` the fix.

    Args:
        message: one line, free of secrets.
        hint: what to do about it, or None.

    """

    failure_class: ClassVar[str] = "fatal"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class QuotaStoreLost(NotSent):
    """The shared rate limit's Redis was away for ``rate_limit.shared_timeout``: the run stops (like a budget)."""

    failure_class = "quota_store"


class PacingTooLong(NotSent):
    """One pacing wait would be longer than ``params.request_timeout``: the request fails, naming the limit."""
