"""The run's spending cap in one worker process: every endpoint's requests reserve from it before they go.

``params.budget`` is for the whole job; each of W worker processes keeps 1/W of it (as it
keeps R/W of a rate). A request reserves its estimate (prompt estimate + ``max_tokens``,
priced by its endpoint) before it is sent. When a reservation would take spent +
reserved past the share, it waits while other requests are in flight (their replies
usually cost less than reserved); once nothing is in flight and it still does not fit,
the budget stops for good in this process: that request and every later one are
refused, so the run ends with what was answered and the rest ``skipped``. The reply's
``usage`` replaces the estimate; a failed attempt is not billed and gives its
reservation back. So what is spent stays under the share unless replies use more than
estimated (prompt tokens above a quarter of the prompt's characters): never more than
the requests in flight.
"""

from __future__ import annotations

import asyncio
import threading
from typing import ClassVar, Literal

__all__ = ["BudgetExhausted", "RunBudget"]

Reservation = Literal["reserved", "wait", "stopped"]


class BudgetExhausted(Exception):
    """The next request could take the run past its budget, so it is not sent."""


class RunBudget:
    """One process's share of ``params.budget``.

    Args:
        max_tokens: the tokens this process may spend (None: no token cap).
        max_usd: the dollars it may spend (None: no dollar cap).

    """

    _registry: ClassVar[dict[tuple[str, float | None, float | None], RunBudget]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, max_tokens: float | None, max_usd: float | None) -> None:
        self.max_tokens = max_tokens
        self.max_usd = max_usd
        self.spent_tokens = 0.0
        self.spent_usd = 0.0
        self._reserved_tokens = 0.0
        self._reserved_usd = 0.0
        self.stopped = False
        self._lock = threading.Lock()
        self._settled: asyncio.Event | None = None

    @classmethod
    def for_job(cls, job: str, max_tokens: float | None, max_usd: float | None) -> RunBudget:
        """The process's budget of run ``job`` (every endpoint of the run draws from the same one)."""
        key = (job, max_tokens, max_usd)
        with cls._registry_lock:
            budget = cls._registry.get(key)
            if budget is None:
                budget = cls._registry[key] = cls(max_tokens, max_usd)
            return budget

    async def reserve(self, tokens: float, usd: float) -> None:
        """Reserve a request's estimate, waiting for requests in flight when it does not fit yet.

        Must run on the process's inference loop (every engine's).

        Raises:
            BudgetExhausted: it could pass the budget (and so will every later request).
        """
        while True:
            found = self.try_reserve(tokens, usd)
            if found == "reserved":
                return
            if found == "stopped":
                raise BudgetExhausted(self.describe())
            if self._settled is None:
                self._settled = asyncio.Event()
            await self._settled.wait()

    def try_reserve(self, tokens: float, usd: float) -> Reservation:
        """Reserve now if it fits; ``wait`` when it may fit once the requests in flight are settled."""
        with self._lock:
            if not self.stopped:
                over_tokens = self.max_tokens is not None and (
                    self.spent_tokens + self._reserved_tokens + tokens > self.max_tokens
                )
                over_usd = self.max_usd is not None and self.spent_usd + self._reserved_usd + usd > self.max_usd
                if over_tokens or over_usd:
                    if self._reserved_tokens > 0 or self._reserved_usd > 0:
                        return "wait"
                    self.stopped = True
            if self.stopped:
                return "stopped"
            self._reserved_tokens += tokens
            self._reserved_usd += usd
            return "reserved"

    def settle(self, reserved_tokens: float, reserved_usd: float, tokens: float, usd: float) -> None:
        """Replace a reservation by what the request really used (0 for an attempt that was not billed)."""
        with self._lock:
            self._reserved_tokens -= reserved_tokens
            self._reserved_usd -= reserved_usd
            self.spent_tokens += tokens
            self.spent_usd += usd
            if self._reserved_tokens < 1e-9 and self._reserved_usd < 1e-12:
                self._reserved_tokens = self._reserved_usd = 0.0  # no float dust left to wait for
        settled, self._settled = self._settled, None
        if settled is not None:
            settled.set()  # whoever waits checks again

    def describe(self) -> str:
        """The refusal message: which cap, and what was spent of it."""
        caps = []
        if self.max_tokens is not None:
            caps.append(f"{self.spent_tokens:,.0f} of {self.max_tokens:,.0f} tokens")
        if self.max_usd is not None:
            caps.append(f"${self.spent_usd:.4f} of ${self.max_usd:.4f}")
        return (
            f"not sent: the next request could pass the run's budget (params.budget; this worker had spent "
            f"{' and '.join(caps)})"
        )
