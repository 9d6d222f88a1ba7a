import asyncio

import pytest

from beameval.inference.classify import Failure
from beameval.inference.limiter import AdaptiveLimiter

HARD = Failure("hard_overload", True, 1.0, 429, "HTTP 429")
SOFT = Failure("soft_overload", True, None, None, "timed out")
TRANSIENT = Failure("transient", True, None, 500, "HTTP 500")
FATAL = Failure("fatal", False, None, 400, "HTTP 400")


def run(coro):
    return asyncio.run(coro)


def test_starts_at_max_and_never_exceeds_it():
    async def main():
        limiter = AdaptiveLimiter(8, initial_limit=8)
        assert limiter.limit == 8
        gate = asyncio.Event()
        seen = []

        async def worker():
            async with limiter.slot():
                seen.append(limiter.in_flight)
                await gate.wait()
                limiter.record(None)

        tasks = [asyncio.create_task(worker()) for _ in range(50)]
        for _ in range(5):
            await asyncio.sleep(0)
        assert limiter.in_flight == 8
        assert limiter.waiting == 42
        gate.set()
        await asyncio.gather(*tasks)
        assert max(seen) == 8 and limiter.peak == 8
        assert limiter.in_flight == 0
        assert limiter.limit == 8

    run(main())


def test_burst_of_429s_from_one_window_halves_once():
    limiter = AdaptiveLimiter(64, initial_limit=64, hard_factor=0.5)

    async def main():
        holders = []
        for _ in range(40):
            slot = limiter.slot()
            await slot.__aenter__()
            holders.append(slot)
        for _ in range(40):  # all 40 in-flight requests come back 429
            limiter.record(HARD)
        assert limiter.limit == 32
        assert limiter.decreases == 1 and limiter.ignored == 39
        for slot in holders:
            await slot.__aexit__(None, None, None)
        assert not limiter.in_window
        # a new window: the next 429 halves again, once
        slot = limiter.slot()
        await slot.__aenter__()
        limiter.record(HARD)
        limiter.record(HARD)
        await slot.__aexit__(None, None, None)
        assert limiter.limit == 16 and limiter.decreases == 2

    run(main())


def test_requests_started_after_a_decrease_end_the_window_only_with_old_ones():
    limiter = AdaptiveLimiter(16, initial_limit=16, hard_factor=0.5)

    async def main():
        old = limiter.slot()
        await old.__aenter__()
        limiter.record(HARD)  # 16 -> 8; window = {old}
        new = limiter.slot()
        await new.__aenter__()
        limiter.record(HARD)  # ignored: `old` is still in flight
        await new.__aexit__(None, None, None)
        assert limiter.limit == 8 and limiter.in_window
        await old.__aexit__(None, None, None)
        assert not limiter.in_window

    run(main())


def test_soft_overload_decreases_by_a_fifth_and_other_failures_do_nothing():
    limiter = AdaptiveLimiter(10, initial_limit=10)

    async def main():
        async with limiter.slot():
            limiter.record(TRANSIENT)
            limiter.record(FATAL)
            assert limiter.limit == 10
            limiter.record(SOFT)
            assert limiter.limit == 8
        one = AdaptiveLimiter(1, initial_limit=1)
        async with one.slot():
            one.record(HARD)
        assert one.limit == 1
        two = AdaptiveLimiter(2, initial_limit=2)
        async with two.slot():
            two.record(SOFT)
        assert two.limit == 1

    run(main())


def _decrease_to(limiter: AdaptiveLimiter, target: int) -> None:
    async def main():
        while limiter.limit > target:
            async with limiter.slot():
                limiter.record(HARD)

    run(main())


async def round_trip(limiter: AdaptiveLimiter, capacity: int | None = None) -> None:
    """Send `limit` requests at once; those above `capacity` get an immediate 429, the rest succeed."""
    slots = []
    for _ in range(limiter.limit):
        slot = limiter.slot()
        await slot.__aenter__()
        slots.append(slot)
    accepted = len(slots) if capacity is None else min(capacity, len(slots))
    for _ in range(len(slots) - accepted):
        limiter.record(HARD)
    for slot in slots[accepted:]:
        await slot.__aexit__(None, None, None)
    for slot in slots[:accepted]:
        limiter.record(None)
        await slot.__aexit__(None, None, None)


def test_grows_back_additively_in_a_few_round_trips():
    limiter = AdaptiveLimiter(64, initial_limit=64)
    _decrease_to(limiter, 1)
    assert limiter.limit == 1

    async def main():
        trips = 0
        while limiter.limit < 64:
            before = limiter.limit
            await round_trip(limiter)
            assert before <= limiter.limit <= min(64, before + 9)  # additive, never a jump
            trips += 1
        return trips

    trips = run(main())
    assert trips <= 10, trips
    assert limiter.limit == 64


def test_capacity_limited_endpoint_settles_around_capacity():
    limiter = AdaptiveLimiter(64, initial_limit=64)

    async def main():
        limits = []
        for _ in range(300):
            await round_trip(limiter, capacity=16)
            limits.append(limiter.limit)
        return limits

    limits = run(main())
    steady = limits[20:]
    assert max(steady) <= 18 and min(steady) >= 8
    accepted = sum(min(16, limit) for limit in steady) / len(steady)
    assert accepted >= 0.85 * 16
    assert limiter.decreases < 300 / 4  # a cut every few round trips at most, not every one


def test_successes_inside_a_window_do_not_undo_the_decrease():
    limiter = AdaptiveLimiter(32, initial_limit=32, hard_factor=0.5)

    async def main():
        slots = []
        for _ in range(20):
            slot = limiter.slot()
            await slot.__aenter__()
            slots.append(slot)
        limiter.record(HARD)
        for slot in slots:
            limiter.record(None)
            await slot.__aexit__(None, None, None)
        assert limiter.limit == 16

    run(main())


def test_increase_wakes_waiters_and_decrease_blocks_new_ones():
    async def main():
        limiter = AdaptiveLimiter(4, initial_limit=4)
        first = limiter.slot()
        await first.__aenter__()
        limiter.record(HARD)  # 4 -> 2, window = {first}
        await first.__aexit__(None, None, None)
        a, b = limiter.slot(), limiter.slot()
        await a.__aenter__()
        await b.__aenter__()
        blocked = asyncio.create_task(limiter.slot().__aenter__())
        await asyncio.sleep(0)
        assert not blocked.done() and limiter.in_flight == 2
        limiter.record(None)  # limit 2 -> 3 (limit // 4 == 0 -> one success per step)
        await asyncio.sleep(0)
        assert blocked.done() and limiter.in_flight == 3
        assert limiter.limit == 3

    run(main())


def test_cancelled_waiter_does_not_leak_a_slot():
    async def main():
        limiter = AdaptiveLimiter(1, initial_limit=1)
        holder = limiter.slot()
        await holder.__aenter__()
        waiter = asyncio.create_task(limiter.slot().__aenter__())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await holder.__aexit__(None, None, None)
        assert limiter.in_flight == 0
        async with limiter.slot():
            assert limiter.in_flight == 1

    run(main())


def test_rejects_zero_limit():
    with pytest.raises(ValueError):
        AdaptiveLimiter(0)


def test_slow_start_doubles_per_round_trip_until_the_cap():
    async def main():
        assert AdaptiveLimiter(64).limit == 32  # the default start: one round trip from 64
        limiter = AdaptiveLimiter(64, initial_limit=8)
        assert limiter.limit == 8
        seen = []
        for _ in range(4):  # one "round trip": fill every slot, then all succeed
            limit = limiter.limit
            seen.append(limit)
            for _ in range(limit):
                async with limiter.slot():
                    limiter.record(None)
        assert seen == [8, 16, 32, 64]
        assert limiter.limit == 64

    run(main())


def test_slow_start_ends_at_the_first_overload():
    async def main():
        limiter = AdaptiveLimiter(64, initial_limit=8)
        for _ in range(8):  # 8 -> 16
            async with limiter.slot():
                limiter.record(None)
        assert limiter.limit == 16
        async with limiter.slot():
            limiter.record(HARD)
        assert limiter.limit == 11 and limiter.decreases == 1  # 16 * 0.7
        for _ in range(8):  # outside slow start, near the last overload point (16): not +1 per success
            async with limiter.slot():
                limiter.record(None)
        assert 11 < limiter.limit < 16

    run(main())


def test_slow_start_never_begins_above_the_cap():
    assert AdaptiveLimiter(3).limit == 3
    assert AdaptiveLimiter(64, initial_limit=100).limit == 64


def test_a_hard_overload_takes_thirty_percent_off_by_default_and_always_at_least_one():
    async def main():
        for start, expected in ((17, 11), (16, 11), (2, 1), (1, 1)):
            limiter = AdaptiveLimiter(64, initial_limit=start)
            async with limiter.slot():
                limiter.record(HARD)
            assert limiter.limit == expected, (start, limiter.limit)

    run(main())


def _ramping() -> AdaptiveLimiter:
    """Slow start at 32 of 64, ramping while callers wait, as the engine ramps it."""
    limiter = AdaptiveLimiter(64, on_ramp=lambda: limiter.waiting > 0)
    return limiter


async def _hold_slots(limiter: AdaptiveLimiter, callers: int, gate: asyncio.Event) -> list:
    """``callers`` tasks that each take a slot and hold it until ``gate`` is set, then succeed."""

    async def caller():
        async with limiter.slot():
            await gate.wait()
            limiter.record(None)

    tasks = [asyncio.create_task(caller()) for _ in range(callers)]
    await asyncio.sleep(0)
    return tasks


def test_slow_start_full_opens_its_remaining_slots_over_the_ramp_without_a_reply():
    async def main():
        gate = asyncio.Event()
        limiter = _ramping()
        loop = asyncio.get_running_loop()
        started = loop.time()
        tasks = await _hold_slots(limiter, 100, gate)
        assert limiter.in_flight == 32
        await asyncio.sleep(0.03)
        partway = limiter.in_flight
        await asyncio.sleep(0.12)
        assert 34 <= partway <= 50, partway  # one more every 0.1 s / 32, not all at once
        assert limiter.in_flight == limiter.limit == 64 and loop.time() - started < 0.2
        gate.set()
        await asyncio.gather(*tasks)

    run(main())


def test_an_overload_ends_the_ramp_where_it_was_cut():
    async def main():
        gate = asyncio.Event()
        limiter = _ramping()
        tasks = await _hold_slots(limiter, 100, gate)
        await asyncio.sleep(0.012)
        limiter.record(HARD)  # a 429 at admission, a few steps into the ramp
        cut = limiter.limit
        assert 22 <= cut <= 26, cut  # 0.7 x (32 + the few steps taken)
        await asyncio.sleep(0.15)
        assert limiter.limit == cut
        gate.set()
        await asyncio.gather(*tasks)

    run(main())


def test_no_ramp_while_slots_are_free_or_nothing_waits():
    async def main():
        gate = asyncio.Event()
        limiter = _ramping()
        tasks = await _hold_slots(limiter, 20, gate)  # a pacer holds the rest back: the limit is not full
        await asyncio.sleep(0.05)
        assert limiter.limit == 32
        tasks += await _hold_slots(limiter, 12, gate)  # exactly full, nobody queued: one step, then it pauses
        await asyncio.sleep(0.05)
        assert limiter.limit == 33
        gate.set()
        await asyncio.gather(*tasks)
        assert limiter.limit == 64  # slow start's +1 per success (32 answers) still applies

    run(main())


def test_without_on_ramp_a_full_slow_start_waits_for_replies():
    async def main():
        gate = asyncio.Event()
        limiter = AdaptiveLimiter(64)
        tasks = await _hold_slots(limiter, 100, gate)
        await asyncio.sleep(0.15)
        assert limiter.limit == 32 and limiter.in_flight == 32
        gate.set()
        await asyncio.gather(*tasks)

    run(main())
