"""The run report's usage and provenance: what the run cost (calls, tokens, latency, cache, USD) and where it came from.

``beameval.report.run_page`` lays the page out; these sections read only ``results.json``'s
``usage``, ``provenance``, ``run`` and ``config``, which older runs may lack in part, so each
renders what is there. Secrets in provenance and config are redacted before they are shown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from beameval.report.html import esc, kv_table, num, redact, table

__all__ = ["models_seen", "provenance_section", "total_tokens", "usage_section"]


def total_tokens(usage: Mapping[str, Any]) -> int | None:
    """Prompt plus completion tokens of the target and the metric calls; None when the run recorded none."""
    total = None
    for block in (usage, usage.get("metric_calls") or {}):
        for key in ("prompt_tokens", "completion_tokens"):
            if isinstance(block.get(key), int):
                total = (total or 0) + block[key]
    return total


def models_seen(results: Mapping[str, Any]) -> str:
    """The models the endpoints reported (escaped HTML), else the configured model, said to be only configured."""
    seen = (results.get("provenance") or {}).get("models_seen")
    if isinstance(seen, Mapping) and seen:
        return ", ".join(
            f"{esc(k)} ({num(v) if not isinstance(v, Mapping) else esc(json.dumps(v))})" for k, v in seen.items()
        )
    if isinstance(seen, list) and seen:
        described = []
        for entry in seen:
            if isinstance(entry, Mapping):
                described.append(", ".join(f"{esc(k)}: {esc(v)}" for k, v in entry.items() if v is not None))
            else:
                described.append(esc(entry))
        return "; ".join(described)
    model = (((results.get("config") or {}).get("target") or {}).get("model")) or {}
    if model.get("name"):
        return f"{esc(model['name'])} (configured; the endpoint's own reports are not recorded in this run)"
    return "none (offline run)" if (results.get("config") or {}).get("target") is None else "not recorded"


def usage_section(usage: Mapping[str, Any]) -> str:
    """The Usage section: target and metric calls, latency, response cache, cost; empty for a run without usage."""
    if not usage:
        return ""
    latency = usage.get("latency_ms") or {}
    pct = latency.get("percentiles") or {}
    parts = ['<section id="usage"><h2>Usage</h2>']
    target = [(k, usage.get(k)) for k in ("requests", "attempts", "prompt_tokens", "completion_tokens") if k in usage]
    batch = usage.get("batch")
    target.insert(0, ("mode", "online" if not isinstance(batch, Mapping) else _batch_mode(batch)))
    calls = usage.get("metric_calls") or {}
    parts.append('<div class="side"><div><h3>target</h3>' + kv_table(target) + "</div>")
    parts.append(
        "<div><h3>metric calls (judge, remote)</h3>"
        + kv_table([(k, v) for k, v in calls.items() if not isinstance(v, Mapping)])
        + "</div></div>"
    )
    if latency.get("count"):
        keys = ["mean", "min", *pct.keys(), "max"]
        values = [latency.get("mean"), latency.get("min"), *pct.values(), latency.get("max")]
        parts.append("<h3>latency (ms)</h3>" + table([esc(k) for k in keys], [[num(v, 1) for v in values]]))
    cache_rows = []
    for who, block in (("target", usage.get("cache")), ("metric calls", calls.get("cache"))):
        if isinstance(block, Mapping):
            nested = all(isinstance(v, Mapping) for v in block.values()) and block
            for name, inner in block.items() if nested else [(who, block)]:
                cache_rows.append((esc(name), num(inner.get("hits")), num(inner.get("misses"))))
    if cache_rows:
        parts.append("<h3>response cache</h3>" + table(["calls", "hits", "misses"], cache_rows))
    cost = usage.get("cost_usd")
    if isinstance(cost, Mapping):  # endpoints with pricing
        rows = [(esc(name), f"${value:,.4f}") for name, value in (cost.get("endpoints") or {}).items()]
        rows.append(("total", f"${cost.get('total', 0):,.4f}"))
        if isinstance(cost.get("batch_saving_usd"), int | float):  # batch mode: what the provider's discount saved
            rows.append(("saved by batch mode", f"${cost['batch_saving_usd']:,.4f}"))
        parts.append("<h3>cost (USD)</h3>" + table(["endpoint", "cost"], rows))
    parts.append("</section>")
    return "".join(parts)


def _batch_mode(batch: Mapping[str, Any]) -> str:
    """``usage.batch`` in a line: the provider's Batch API, with its batches, requests and resubmissions."""
    return (
        f"batch ({num(batch.get('batches'))} batches, {num(batch.get('requests'))} requests, "
        f"{num(batch.get('resubmitted'))} resubmitted)"
    )


def provenance_section(results: Mapping[str, Any]) -> str:
    """The Provenance section: provenance, run and config, secrets redacted (older runs: a line saying so)."""
    provenance = results.get("provenance") or {}
    run = results.get("run") or {}
    parts = ['<section id="provenance"><h2>Provenance</h2>']
    if provenance:
        parts.append(kv_table((k, v) for k, v in redact(provenance).items()))
    else:
        parts.append('<p class="sub">This run predates provenance records.</p>')
    if run:
        parts.append("<h3>run</h3>" + kv_table((k, v) for k, v in redact(run).items()))
    config = results.get("config")
    if config is not None:
        dumped = json.dumps(redact(config), indent=2, ensure_ascii=False, default=str)
        parts.append(f'<h3>config</h3><pre class="config">{esc(dumped)}</pre>')
    parts.append("</section>")
    return "".join(parts)
