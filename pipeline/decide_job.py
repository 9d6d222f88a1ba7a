"""The job of a ``--decide`` run: every wave's Beam job is part of the one job of OUT_DIR (``pipeline.job``).

So ``params.budget`` holds for all the waves together, as for one invocation of
``pipeline.run``: the waves share the job's id (``job.json``, the shared rate limits in
Redis) and its spend ledger, each wave's workers get the budget less what the job has
spent so far (every earlier wave, the preflight's request and any earlier invocation,
killed ones included), and a later ``--resume`` (with ``--decide`` or without) goes on
from that spend rather than from a fresh budget.

Each wave after the first is an invocation of the job of its own in the ledger: its
processes lease from the budget left when it starts, and a wave's leases (what its
processes took and did not spend) are not counted against the next. The first wave keeps
the run's invocation, the one that paid the preflight's request. With ``targets:`` every
target of every wave draws from the same budget, as in a multi-target run.
"""

from __future__ import annotations

import uuid
from typing import Any

from beameval.config.params import JobScope
from beameval.config.schema import EvalConfig
from beameval.inference.spend_ledger import spent_in
from pipeline.job import JobSpend, job_spend

__all__ = ["spent_after_wave", "wave_job", "wave_spend"]


def wave_job(scope: JobScope, number: int) -> JobScope:
    """The job as wave ``number`` (from 0) runs it: the same id and ledger, a new invocation after the first."""
    return scope if number == 0 else JobScope(id=scope.id, invocation=uuid.uuid4().hex, spend=scope.spend)


def wave_spend(config: EvalConfig, job: JobScope, number: int, shared: frozenset[str] = frozenset()) -> JobSpend:
    """What wave ``number``'s ``results.json`` takes from the ledger: the job's whole spend, and earlier usage.

    The requests of invocations before this run are added to the first wave's usage only;
    the later waves' earlier invocations are this run's own earlier waves, which
    ``pipeline.decide_usage`` sums already.
    """
    spend = job_spend(config, job, shared)
    return spend if number == 0 else JobSpend(spend.total)


def spent_after_wave(scope: JobScope, spent: tuple[float, float], targets: list[dict[str, Any]]) -> tuple[float, float]:
    """What the job has spent after a wave of ``targets`` (their results.json), ``spent`` being its spend before it.

    With the job's ledger, the ledger's sum. Without one (a remote OUT_DIR) each target's
    ``usage.budget`` counts ``spent`` plus its own requests, so the job's is ``spent`` plus
    what each target added.
    """
    if scope.spend is not None:
        return spent_in(scope.spend)
    blocks = [(results.get("usage") or {}).get("budget") or {} for results in targets]
    return (
        spent[0] + sum(float(block.get("spent_tokens") or 0) - spent[0] for block in blocks if block),
        spent[1] + sum(float(block.get("spent_usd") or 0.0) - spent[1] for block in blocks if block),
    )
