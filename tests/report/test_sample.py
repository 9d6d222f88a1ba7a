"""The bounded row sample: uniform reservoirs, failed and flipped rows first, and the failure breakdown."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
from scipy import stats

from beameval.report.sample import FailureBreakdown, Reservoir, RowSampler, cause_of


def test_reservoir_keeps_everything_below_capacity_in_any_batching():
    reservoir = Reservoir(10, random.Random(1))
    items = list(range(7))
    for start, size in ((0, 3), (3, 0), (3, 4)):
        for offset, slot in reservoir.offer(size):
            reservoir.put(slot, items[start + offset])
    assert reservoir.items == items and reservoir.seen == 7


def test_reservoir_is_uniform():
    """Each of n items is kept with probability k/n: a chi-square test over many seeded draws."""
    n, k, trials = 60, 6, 3000
    kept = Counter()
    for seed in range(trials):
        reservoir = Reservoir(k, random.Random(seed))
        position = 0
        for size in (5, 17, 1, 37):  # uneven batches
            for offset, slot in reservoir.offer(size):
                reservoir.put(slot, position + offset)
            position += size
        assert len(reservoir.items) == k and len(set(reservoir.items)) == k
        kept.update(reservoir.items)
    observed = [kept[i] for i in range(n)]
    expected = trials * k / n
    chi2 = sum((o - expected) ** 2 / expected for o in observed)
    assert stats.chi2.sf(chi2, df=n - 1) > 0.001, observed


def batch(statuses: list[str], start: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"row_index": start + i, "status": s, "output_text": f"out {start + i}"} for i, s in enumerate(statuses)]
    )


def test_sampler_keeps_every_failed_and_flipped_row_then_a_seeded_sample():
    statuses = ["error" if i % 50 == 0 else "ok" for i in range(1000)]  # 20 failures
    flipped = {1, 2, 3, 501}  # 500 would be a failed row, counted there

    def sample(seed: int):
        sampler = RowSampler(budget=100, seed=seed, priority_indices=flipped)
        for start in range(0, 1000, 128):
            sampler.add_batch(batch(statuses[start : start + 128], start))
        return sampler.result()

    rows, info = sample(3)
    indices = [r["row_index"] for r in rows]
    assert len(rows) == 100 and indices == sorted(indices) and len(set(indices)) == 100
    assert {i for i in range(1000) if i % 50 == 0} <= set(indices)
    assert flipped <= set(indices)
    assert (info.total_rows, info.failed_rows, info.flipped_rows) == (1000, 20, 4)
    assert (info.kept_failed, info.kept_flipped, info.kept_random, info.kept) == (20, 4, 76, 100)
    assert not info.complete
    assert sample(3)[0] == rows  # the seed fixes the page
    assert sample(4)[0] != rows
    assert rows[0] == {"row_index": 0, "status": "error", "output_text": "out 0"}


def test_failures_beyond_the_budget_leave_a_fifth_for_the_other_rows():
    sampler = RowSampler(budget=50, seed=0)
    sampler.add_batch(batch(["error"] * 900 + ["ok"] * 100))
    rows, info = sampler.result()
    assert (info.kept_failed, info.kept_random) == (40, 10)
    assert Counter(r["status"] for r in rows) == {"error": 40, "ok": 10}


def test_small_runs_are_complete_and_columns_can_be_limited():
    sampler = RowSampler(budget=10, columns=["row_index", "status"])
    sampler.add_batch(batch(["ok", "error", "ok"]))
    rows, info = sampler.result()
    assert info.complete and rows == [
        {"row_index": 0, "status": "ok"},
        {"row_index": 1, "status": "error"},
        {"row_index": 2, "status": "ok"},
    ]


def test_failure_breakdown_counts_by_phase_metric_and_cause_with_a_cap():
    breakdown = FailureBreakdown(max_causes=2)
    ids = [
        breakdown.add({"phase": "scoring", "metric": "f1", "error": "bad reference; also bad candidate"}),
        breakdown.add({"phase": "scoring", "metric": "f1", "error": "bad  reference"}),
        breakdown.add({"phase": "sample_generation", "metric": None, "error": "HTTP 503 from host"}),
        breakdown.add({"phase": "sample_generation", "metric": None, "error": "HTTP 404 from host"}),
        breakdown.add({"phase": "sample_generation", "metric": None, "error": "HTTP 400 from host"}),
    ]
    assert ids[0] == ids[1] and ids[2] != ids[0] and ids[3] == ids[4] != ids[2]
    assert breakdown.total == 5
    assert breakdown.by_phase == {"scoring": 2, "sample_generation": 3}
    assert breakdown.by_metric == {"f1": 2, "(none)": 3}
    assert [(g.phase, g.cause, g.count) for g in breakdown.groups] == [
        ("scoring", "bad reference", 2),
        ("sample_generation", "(other causes)", 2),
        ("sample_generation", "HTTP 503 from host", 1),
    ]
    assert cause_of("x" * 300) == "x" * 157 + "..."
    assert cause_of("data.jsonl line 12 is not JSON; other") == cause_of("data.jsonl line 9 is not  JSON")
