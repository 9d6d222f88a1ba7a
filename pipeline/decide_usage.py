"""A ``--decide`` run's usage as if it were one run: every wave's Beam job folded into one ``usage`` and ``run`` block.

Each wave is a Beam job whose ``results.json`` counts only what that job did: the rows of
earlier waves are answered from the journal there (cache hits, no requests). The run as a
whole sent every wave's requests, so its ``usage`` is the sum of the waves': requests,
attempts and tokens (the target's and each metric endpoint's), with ``cache.hits`` the
hits that were not the run's own earlier answers replayed (the last wave's hits less what
the earlier waves sent and got answered), and ``cost_usd`` priced on the sums. ``latency_ms``
is each request's latency: count, mean, min and max are exact over the waves; the
percentiles are the waves' weighted by their request counts (a wave's sketch is not kept, so
they are an approximation when several waves sent requests). ``usage.budget`` already counts
every wave (each wave's job starts from what the earlier ones spent), and so is the last
wave's. The ``run`` block sums the counters and wall times; its gauges are the last wave's.
"""

from __future__ import annotations

import copy
from typing import Any

from beameval.config.schema import EvalConfig
from pipeline.quota import costs

__all__ = ["whole_run"]

_CALLS = ("requests", "attempts", "prompt_tokens", "completion_tokens")


def whole_run(config: EvalConfig, waves: list[dict[str, Any]]) -> dict[str, Any]:
    """The last wave's results document with ``usage`` and ``run`` covering every wave (see the module docstring)."""
    results = copy.deepcopy(waves[-1])
    if len(waves) < 2:
        return results
    usage = results["usage"]
    _sum_calls(usage, [w["usage"] for w in waves])
    _sum_calls(usage["metric_calls"], [w["usage"].get("metric_calls") or {} for w in waves])
    usage["latency_ms"] = _latency([w["usage"].get("latency_ms") or {} for w in waves])
    cost = costs(config, usage)
    if cost is not None:
        usage["cost_usd"] = cost
    results["run"] = whole_run_info([w.get("run") or {} for w in waves])
    return results


def whole_run_info(waves: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``run`` block of every wave's job together: counters and wall times summed, the last wave's gauges."""
    info = copy.deepcopy(waves[-1])
    counters: dict[str, int] = {}
    for wave in waves:
        for name, count in (wave.get("counters") or {}).items():
            counters[name] = counters.get(name, 0) + count
    info["counters"] = counters
    info["wall_time_s"] = round(sum(float(wave.get("wall_time_s") or 0.0) for wave in waves), 3)
    info["waves"] = len(waves)
    return info


def _sum_calls(block: dict[str, Any], waves: list[dict[str, Any]]) -> None:
    """One endpoint family's counts (the target's, or the metric calls') summed over the waves, in place."""
    if not block:
        return
    for name in _CALLS:
        block[name] = sum(int(wave.get(name) or 0) for wave in waves)
    earlier = sum(int(wave.get("requests") or 0) for wave in waves[:-1])
    hits = int(((waves[-1].get("cache") or {}).get("hits")) or 0)
    block["cache"] = {"hits": max(hits - earlier, 0), "misses": block["requests"]}
    by_metric: dict[str, dict[str, int]] = {}
    for wave in waves:
        for key, counts in (wave.get("by_metric") or {}).items():
            mine = by_metric.setdefault(key, {})
            for name, count in counts.items():
                if isinstance(count, int):
                    mine[name] = mine.get(name, 0) + count
    for key, counts in by_metric.items():
        block.setdefault("by_metric", {}).setdefault(key, {}).update(counts)


def _latency(waves: list[dict[str, Any]]) -> dict[str, Any]:
    """Request latencies over the waves: exact count, mean, min and max; request-weighted percentiles."""
    sent = [wave for wave in waves if wave.get("count")]
    if not sent:
        return copy.deepcopy(waves[-1])
    count = sum(int(wave["count"]) for wave in sent)
    percentiles: dict[str, float] = {}
    for key in sent[0].get("percentiles") or {}:
        if all((wave.get("percentiles") or {}).get(key) is not None for wave in sent):
            percentiles[key] = sum(wave["percentiles"][key] * wave["count"] for wave in sent) / count
    return {
        "count": count,
        "mean": sum(wave["mean"] * wave["count"] for wave in sent) / count,
        "min": min(wave["min"] for wave in sent),
        "max": max(wave["max"] for wave in sent),
        "percentiles": percentiles,
    }
