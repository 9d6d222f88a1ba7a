"""The job's spending cap in one worker process: every endpoint's requests reserve from it before they go.

``params.budget`` is for the whole job: every target, judge and remote metric, every
worker process, every invocation (``--resume`` continues from what was spent). A request
reserves its estimate (everything billed as input, plus ``max_tokens``, priced by its
endpoint) before it is sent. With the job's spend ledger (``spend_ledger``: worker
processes on one machine), a process spends what it leased from the job's budget and
leases more when its next request does not fit; without one (a remote OUT_DIR), each of
W processes keeps a fixed 1/W. When a reservation does not fit and nothing more can be
leased, it waits while other requests of the process are in flight (their replies
usually cost less than reserved); once nothing is in flight and it still does not fit,
the budget stops for good in this process: that request and every later one are
refused, so the run ends with what was answered and the rest ``skipped``. The reply's
``usage`` replaces the estimate (and is appended to the ledger at once, so a killed run's
spend is never forgotten); a failed attempt is not billed and gives its reservation
back. So what is spent stays under the budget unless replies use more than estimated:
never more than the requests in flight.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, ClassVar, Literal

from beameval.inference.spend_ledger import SpendLedger, endpoint_label

if TYPE_CHECKING:
    from beameval.inference.quota import EndpointQuota

__all__ = ["BudgetExhausted", "RunBudget"]

Reservation = Literal["reserved", "wait", "stopped"]
#: Dollars below this are rounding, not a shortfall.
_USD_EPSILON = 1e-12


class BudgetExhausted(Exception):
    """The next request could take the run past its budget, so it is not sent."""


_LedgerKey = tuple[str, str, int] | None


class RunBudget:
    """One process's part of ``params.budget``.

    Args:
        max_tokens: the tokens the process may spend, or with ``ledger`` the job's workers
            together (None: no token cap).
        max_usd: the dollars, likewise (None: no dollar cap).
        ledger: the job's spend ledger (leases and spend logs), or None: the caps are this
            process's alone.

    """

    _registry: ClassVar[dict[tuple[str, float | None, float | None, _LedgerKey], RunBudget]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, max_tokens: float | None, max_usd: float | None, ledger: SpendLedger | None = None) -> None:
        self.max_tokens = max_tokens
        self.max_usd = max_usd
        self._ledger = ledger
        # What the process may spend now: the caps, or with a ledger what it has leased so far.
        self._limit_tokens = 0.0 if ledger is not None else max_tokens or 0.0
        self._limit_usd = 0.0 if ledger is not None else max_usd or 0.0
        self._endpoints: dict[str, list[int]] = {}  # requests, prompt and completion tokens, per endpoint label
        self._counts_of: dict[str, list[int]] = {}  # endpoint_key -> its counts in _endpoints (no digest per reply)
        self.spent_tokens = 0.0
        self.spent_usd = 0.0
        self._reserved_tokens = 0.0
        self._reserved_usd = 0.0
        self._held_tokens = 0.0  # batch estimates charged here (``hold``): they take room, they are not spend
        self._held_usd = 0.0
        self.stopped = False
        self._lock = threading.Lock()
        self._settled: asyncio.Event | None = None

    @classmethod
    def for_job(cls, job: str, max_tokens: float | None, max_usd: float | None, ledger: _LedgerKey = None) -> RunBudget:
        """The process's budget of job ``job`` (every endpoint of the job draws from the same one).

        ``ledger``: (folder, invocation, W) of the job's spend ledger, shared with the other
        worker processes; None: ``max_tokens`` and ``max_usd`` are this process's alone.
        """
        key = (job, max_tokens, max_usd, ledger)
        with cls._registry_lock:
            budget = cls._registry.get(key)
            if budget is None:
                shared = None if ledger is None else SpendLedger(*ledger, max_tokens, max_usd)
                budget = cls._registry[key] = cls(max_tokens, max_usd, shared)
            return budget

    @classmethod
    def of(cls, quota: EndpointQuota) -> RunBudget | None:
        """The process's budget for an endpoint of ``quota``'s job; None without a budget or a ledger.

        With the job's ledger the caps are the job's (and with no caps it only records the
        spend); without one each of W processes keeps 1/W.
        """
        budget = quota.budget
        if quota.ledger is not None:  # it records what every request spent, with a budget or without
            ledger = (quota.ledger, quota.invocation, max(1, quota.workers))
            if budget is None:
                return cls.for_job(quota.job, None, None, ledger)
            return cls.for_job(quota.job, budget.max_tokens, budget.max_usd, ledger)
        if budget is None or (budget.max_tokens is None and budget.max_usd is None):
            return None
        workers = max(1, quota.workers)
        return cls.for_job(
            quota.job,
            None if budget.max_tokens is None else budget.max_tokens / workers,
            None if budget.max_usd is None else budget.max_usd / workers,
        )

    @classmethod
    def close_all(cls) -> None:
        """Write and close every spend log of this process and forget its budgets (a run in it has ended)."""
        with cls._registry_lock:
            budgets, cls._registry = list(cls._registry.values()), {}
        for budget in budgets:
            if budget._ledger is not None:
                budget._ledger.close()

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
            if not self.stopped and not self._fits(tokens, usd) and not self._lease(tokens, usd):
                if self._reserved_tokens > 0 or self._reserved_usd > 0:
                    return "wait"
                self.stopped = True
                if self._ledger is not None:  # what it holds is for the other processes now
                    self._return_idle()
            if self.stopped:
                return "stopped"
            self._reserved_tokens += tokens
            self._reserved_usd += usd
            return "reserved"

    def hold(self, tokens: float, usd: float) -> bool:
        """Take room for a batch's estimate before it is submitted, from the same budget as every request.

        False (nothing taken) when the job's budget cannot hold it. A batch is paid for in
        one piece when its answers arrive, possibly in another process or invocation, so
        with the job's ledger the estimate is held there, not in this process: whichever
        process collects the batch settles it (``settle_hold``), as a reply settles a
        request's reservation. Without a ledger (a remote OUT_DIR) it stays held in this
        process until it ends: it may stop early, never spend past the budget.
        """
        with self._lock:
            if self.stopped:
                return False
            if self._ledger is not None:
                if self._ledger.hold(tokens, usd):
                    return True
                self._return_idle()  # what this process leased and has not used may be what the hold lacks
                return self._ledger.hold(tokens, usd)
            if not self._fits(tokens, usd):
                return False
            self._held_tokens += tokens
            self._held_usd += usd
            return True

    def settle_hold(self, held: tuple[float, float], used: tuple[float, float]) -> None:
        """Settle collected batches' holds: ``used`` (what their answers used, settled here already) stays spent.

        With the job's ledger, the rest of what they held is free for every process again
        (what was used becomes this process's, where it was spent). Without one, nothing
        changes: the holds stay in the process that made them.
        """
        if self._ledger is None:
            return
        with self._lock:
            self._ledger.settle_hold(held, used)
            if self.max_tokens is not None:
                self._limit_tokens += used[0]
            if self.max_usd is not None:
                self._limit_usd += used[1]
        self._wake()  # room was freed

    def _return_idle(self) -> None:
        """Give the job's ledger back what this process leased and neither spent nor reserved."""
        assert self._ledger is not None
        idle_tokens = max(self._limit_tokens - self.spent_tokens - self._reserved_tokens, 0.0)
        idle_usd = max(self._limit_usd - self.spent_usd - self._reserved_usd, 0.0)
        idle_tokens = idle_tokens if self.max_tokens is not None else 0.0
        idle_usd = idle_usd if self.max_usd is not None else 0.0
        self._ledger.give_back(idle_tokens, idle_usd)
        self._limit_tokens -= idle_tokens
        self._limit_usd -= idle_usd

    def _fits(self, tokens: float, usd: float) -> bool:
        """Whether a reservation fits in what the process may spend now (its caps, or its leases)."""
        return (self.max_tokens is None or self._lacking(tokens, usd)[0] <= 0) and (
            self.max_usd is None or self._lacking(tokens, usd)[1] <= _USD_EPSILON
        )

    def _lacking(self, tokens: float, usd: float) -> tuple[float, float]:
        return (
            self.spent_tokens + self._reserved_tokens + self._held_tokens + tokens - self._limit_tokens,
            self.spent_usd + self._reserved_usd + self._held_usd + usd - self._limit_usd,
        )

    def _lease(self, tokens: float, usd: float) -> bool:
        """Lease what the reservation lacks (and some more) from the job's ledger; False when the job has not got it."""
        if self._ledger is None:
            return False
        lacking_tokens, lacking_usd = self._lacking(tokens, usd)
        granted = self._ledger.lease(
            max(lacking_tokens, 0.0) if self.max_tokens is not None else 0.0,
            max(lacking_usd, 0.0) if self.max_usd is not None else 0.0,
        )
        if granted is None:
            return False
        self._limit_tokens += granted[0]
        self._limit_usd += granted[1]
        return self._fits(tokens, usd)

    def settle(
        self,
        reserved_tokens: float,
        reserved_usd: float,
        tokens: float,
        usd: float,
        *,
        endpoint: str = "",
        prompt: int = 0,
        completion: int = 0,
    ) -> None:
        """Replace a reservation by what the request really used (0 for an attempt that was not billed).

        ``endpoint`` (its ``endpoint_key``), ``prompt`` and ``completion`` go to the job's
        ledger, so a later invocation's ``results.json`` counts this request in its usage.
        """
        with self._lock:
            self._reserved_tokens -= reserved_tokens
            self._reserved_usd -= reserved_usd
            self.spent_tokens += tokens
            self.spent_usd += usd
            if self._reserved_tokens < 1e-9 and self._reserved_usd < 1e-12:
                self._reserved_tokens = self._reserved_usd = 0.0  # no float dust left to wait for
            if self._ledger is not None and (tokens or usd or prompt or completion):
                counts = self._counts_of.get(endpoint)
                if counts is None:
                    counts = self._counts_of[endpoint] = self._endpoints.setdefault(endpoint_label(endpoint), [0, 0, 0])
                counts[0] += 1
                counts[1] += prompt
                counts[2] += completion
                capped = self.max_tokens is not None or self.max_usd is not None
                self._ledger.record(self.spent_tokens, self.spent_usd, self._endpoints, now=capped)  # as it happens
        self._wake()

    def _wake(self) -> None:
        """Whoever waits for a reservation to fit checks again."""
        settled, self._settled = self._settled, None
        if settled is not None:
            settled.set()

    def describe(self) -> str:
        """The refusal message: which cap, and what was spent of it."""
        caps = []
        if self.max_tokens is not None:
            caps.append(f"{self.spent_tokens:,.0f} of {self.max_tokens:,.0f} tokens")
        if self.max_usd is not None:
            caps.append(f"${self.spent_usd:.4f} of ${self.max_usd:.4f}")
        return (
            f"not sent: the next request could pass the job's budget (params.budget; this worker had spent "
            f"{' and '.join(caps)})"
        )
