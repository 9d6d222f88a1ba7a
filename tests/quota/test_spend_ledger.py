"""The job's spend ledger on real files: leases never pass the budget, a torn line is ignored, resumes add up.

Two ``RunBudget``s on one ledger folder stand for two worker processes (each has its own
spend log and takes leases under the same ``flock``); the end-to-end runs with 1, 2 and 4
real worker processes are in ``test_job_budget.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from beameval.inference.budget import RunBudget
from beameval.inference.spend_ledger import SpendLedger, endpoint_label, hold_for_invocation, spent_in, usage_before


def _worker(folder: Path, invocation: str, cap: float, workers: int = 2) -> RunBudget:
    """One worker process's budget: its own spend log, the invocation's leases (W = ``workers``)."""
    return RunBudget(cap, None, SpendLedger(str(folder), invocation, workers, cap, None))


def test_two_workers_spend_the_whole_budget_between_them_and_never_more(tmp_path: Path) -> None:
    first, second = _worker(tmp_path, "a", 100.0), _worker(tmp_path, "a", 100.0)
    spent = 0
    while True:  # the first worker alone spends all it can: it is not held to 1/2 of the budget
        if first.try_reserve(7, 0.0) != "reserved":
            break
        first.settle(7, 0.0, 5, 0.0, endpoint="e", prompt=2, completion=3)
        spent += 5
    assert 100 - 7 < spent <= 100  # stopped when the next estimate (7) did not fit
    assert second.try_reserve(7, 0.0) == "stopped"  # nothing left to lease
    assert first.stopped and second.stopped
    assert spent_in(str(tmp_path)) == (spent, 0.0)
    assert usage_before(str(tmp_path), "b") == {endpoint_label("e"): [spent // 5, 2 * spent // 5, 3 * spent // 5]}
    assert usage_before(str(tmp_path), "a") == {}  # this invocation's own usage is in its rows


def test_a_worker_waits_while_its_requests_are_in_flight_then_gives_back_what_it_holds(tmp_path: Path) -> None:
    first, second = _worker(tmp_path, "a", 20.0), _worker(tmp_path, "a", 20.0)
    assert first.try_reserve(7, 0.0) == "reserved"  # leases max(7, 20 / 4) = 7
    assert second.try_reserve(12, 0.0) == "reserved"  # leases 12 of the 13 left
    assert first.try_reserve(7, 0.0) == "wait"  # 1 left: it may fit once its request settles
    first.settle(7, 0.0, 1, 0.0)
    assert first.try_reserve(13, 0.0) == "stopped"  # its 6 and the 1 unleased cannot pay 13
    second.settle(12, 0.0, 12, 0.0)
    assert second.try_reserve(7, 0.0) == "reserved"  # the 6 the first gave back, and the 1
    assert first.try_reserve(1, 0.0) == "stopped"  # stopped for good


def test_a_batch_holds_its_estimate_until_any_worker_collects_it(tmp_path: Path) -> None:
    """A hold is the job's, not the process's: another worker settles it, and what it used stays spent."""
    submitter, collector = _worker(tmp_path, "a", 100.0), _worker(tmp_path, "a", 100.0)
    assert submitter.hold(60, 0.0)  # the batch's estimate
    assert not collector.hold(50, 0.0)  # 40 left while it runs
    assert collector.try_reserve(40, 0.0) == "reserved"  # an online request takes the rest
    collector.settle(40, 0.0, 40, 0.0)
    collector.settle(0, 0.0, 10, 0.0, endpoint="batch", prompt=4, completion=6)  # the batch's answers used 10
    collector.settle_hold((60, 0.0), (10, 0.0))
    assert collector.try_reserve(50, 0.0) == "reserved"  # 100 - 40 - 10: the 50 the batch held and did not use
    assert collector.try_reserve(1, 0.0) == "wait"
    assert spent_in(str(tmp_path)) == (50.0, 0.0)  # the online request and the batch's answers


def test_a_resume_holds_what_batches_still_running_hold(tmp_path: Path) -> None:
    """What the record says live batches hold is taken before the workers start, and freed as they are collected."""
    hold_for_invocation(str(tmp_path), "b", 70.0, 0.0)
    worker = _worker(tmp_path, "b", 100.0)
    assert not worker.hold(40, 0.0)  # 30 left beside the running batches
    assert worker.try_reserve(30, 0.0) == "reserved"
    worker.settle(30, 0.0, 30, 0.0)
    worker.settle(0, 0.0, 5, 0.0)  # collected: its answers used 5 of the 70
    worker.settle_hold((70, 0.0), (5, 0.0))
    assert worker.hold(65, 0.0) and not worker.hold(1, 0.0)  # 100 - 30 - 5


def test_a_torn_last_line_counts_the_line_before_it(tmp_path: Path) -> None:
    budget = _worker(tmp_path, "a", 1000.0, workers=1)
    for _ in range(3):
        assert budget.try_reserve(10, 0.0) == "reserved"
        budget.settle(10, 0.0, 10, 0.0)
    (log,) = [name for name in os.listdir(tmp_path) if name.startswith("spent-")]
    with open(tmp_path / log, "ab") as handle:
        handle.write(b'{"tokens":99')  # a kill -9 in the middle of a write
    assert spent_in(str(tmp_path)) == (30.0, 0.0)
