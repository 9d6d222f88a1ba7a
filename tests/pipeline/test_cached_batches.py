"""A run answered from the store reads its rows in batches: batches that mix hits and misses give a fresh run's rows.

Real parts: the CLI in-process, Beam's local runner over real files, HTTP to the project's
test server (which counts the requests it gets per prompt). The store is filled by a first
run over two rows of every three; the rerun over all of them, read in small batches, must
send each other row exactly once and write ``rows/``, ``errors/`` and the summary as a run
without any store does.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import pipeline.graph
from tests.pipeline.test_resume_pipeline import config_for
from transforms import store_join

ROWS = 46
#: Every third row's reference differs from the echoed prompt; the last row's prompt cannot render.
DATA: list[dict[str, Any]] = [
    {"question": f"batched question {i}", "answer": f"batched question {i}" if i % 3 else "other"}
    for i in range(ROWS - 1)
]
DATA.append({"answer": "no question"})
STORED = [row for i, row in enumerate(DATA[:-1]) if i % 3]  # the store answers these; the rest are sent
#: The columns a stored answer changes (``cached``, no attempt, no latency); every other one is the fresh run's.
CALL_COLUMNS = ("cached", "attempts", "latency_ms")


def written(row: dict[str, Any]) -> dict[str, Any]:
    """A rows/ row's values but the call's own, a NaN score as text (NaN is not equal to itself)."""
    return {
        name: "NaN" if isinstance(value, float) and math.isnan(value) else value
        for name, value in row.items()
        if name not in CALL_COLUMNS
    }


def lenient(config: dict[str, Any]) -> dict[str, Any]:
    """The run goes on past the failed row (a strict run would stop sending at it, wherever its batch is)."""
    return dict(config, params={**config["params"], "ignore_request_failure": True})


@pytest.mark.parametrize("buckets", [store_join.BUCKETS, 2], ids=["buckets-as-shipped", "two-buckets"])
def test_a_cached_rerun_in_mixed_batches_writes_the_fresh_rows_and_sends_each_miss_once(
    clean_server, model_target, write_jsonl, run_eval, tmp_path, monkeypatch, buckets
):
    """With two join buckets, every batch out of the join mixes hits and misses too (its hits are packed again)."""
    config = lenient(config_for(write_jsonl(DATA), model_target()))
    fresh = run_eval(config)
    assert fresh.code == 0, fresh.stderr
    assert clean_server.stats()["requests"] == ROWS - 1

    store = tmp_path / "store"
    filling = dict(config_for(write_jsonl(STORED, "stored.jsonl"), model_target()), cache={"path": str(store)})
    assert run_eval(filling).code == 0

    monkeypatch.setattr(pipeline.graph, "OFFLINE_BATCH_ROWS", 4)  # a dozen batches, each with hits and misses
    monkeypatch.setattr(store_join, "BUCKETS", buckets)
    clean_server.reset()
    cached = run_eval(dict(config, cache={"path": str(store), "mode": "read_only"}))
    assert cached.code == 0, cached.stderr
    sent = clean_server.stats()
    misses = [row["question"] for i, row in enumerate(DATA[:-1]) if i % 3 == 0]
    assert sent["requests"] == len(misses) and sorted(sent["per_prompt"]) == sorted(misses)
    assert set(sent["per_prompt"].values()) == {1}  # each miss once, whatever batch it was in
    assert cached.results["usage"]["cache"] == {"hits": len(STORED), "misses": len(misses)}
    counters = cached.results["run"]["counters"]  # the join's own count: the row with no request is a miss too
    assert (counters["cache_hits"], counters["cache_misses"]) == (len(STORED), ROWS - len(STORED))

    assert len(cached.rows) == len(fresh.rows) == ROWS
    columns = set(fresh.rows[0])
    assert set(cached.rows[0]) == columns
    for before, after in zip(fresh.rows, cached.rows, strict=True):
        hit = before["row_index"] < ROWS - 1 and before["row_index"] % 3 != 0
        assert written(after) == written(before), before["row_index"]
        if hit:
            assert (after["cached"], after["attempts"], after["latency_ms"]) == (True, 0, None), before["row_index"]
        else:  # sent again (or failed again): only the latency differs
            assert (after["cached"], after["attempts"]) == (before["cached"], before["attempts"]), before["row_index"]
    assert len(fresh.errors) == 1 and cached.errors == fresh.errors  # the row whose prompt does not render
    assert cached.results["aggregate_scores"] == fresh.results["aggregate_scores"]


def test_repeated_samples_read_in_batches_are_each_answered_from_the_store(
    clean_server, model_target, write_jsonl, run_eval, tmp_path, monkeypatch
):
    rows = DATA[:10]
    config = config_for(write_jsonl(rows), model_target())
    config = dict(config, params={**config["params"], "repeats": 2}, cache={"path": str(tmp_path / "store")})
    first = run_eval(config)
    assert first.code == 0, first.stderr
    assert clean_server.stats()["requests"] == 2 * len(rows)

    monkeypatch.setattr(pipeline.graph, "OFFLINE_BATCH_ROWS", 3)  # batches of 3 rows, 6 samples once repeated
    clean_server.reset()
    second = run_eval(config)
    assert second.code == 0, second.stderr
    assert clean_server.stats()["requests"] == 0
    assert second.results["usage"]["cache"] == {"hits": 2 * len(rows), "misses": 0}
    order = [(row["row_index"], row["sample_index"]) for row in second.rows]
    assert sorted(order) == [(i, k) for i in range(len(rows)) for k in range(2)]
    by_sample = {(row["row_index"], row["sample_index"]): written(row) for row in first.rows}
    assert all(written(row) == by_sample[row["row_index"], row["sample_index"]] for row in second.rows)
    assert all(row["cached"] and row["attempts"] == 0 for row in second.rows)
