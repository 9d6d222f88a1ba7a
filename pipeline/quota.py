"""The job-level side of quotas: worker count, the budget left, costs, and a stopped run's fields.

The job itself (its id, its spend ledger, what earlier invocations spent) is ``pipeline.job``.

W, the worker processes that each keep R/W and T/W (and 1/W of the budget where the job has
no spend ledger; ``params.worker_processes`` when set, else from the runner's options):

* local runner (no ``--runner``, ``DirectRunner``): 1 in ``in_memory`` and
  ``multi_threading`` mode (threads share one process's engines); ``--direct_num_workers``
  in ``multi_processing`` mode (0 means the machine's CPU count, as Beam reads it);
* ``PortableRunner`` against Beam's Python job service, EXTERNAL worker pools included:
  ``--direct_num_workers`` (the job service's runner asks the pools for that many SDK
  workers, spread over the pools); with another job server (Flink's, Spark's) it is not known;
* ``FlinkRunner``: not known to the driver (TaskManagers × ``--sdk_worker_parallelism``);
* ``DataflowRunner``: ``--max_num_workers`` (else ``--num_workers``) × the vCPUs of
  ``--machine_type`` (Dataflow runs one SDK process per vCPU; 1 with the experiment
  ``no_use_multiple_sdk_containers``), an upper bound while autoscaling keeps fewer workers;
  not known without a machine type.

Where W is not known, it is 1 and the driver warns that the job may send W times the rate:
set ``params.worker_processes`` or ``rate_limit.shared`` there.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from apache_beam.options.pipeline_options import (
    DebugOptions,
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)

from beameval.config.params import JobScope, Params
from beameval.config.quota import Budget, Pricing
from beameval.config.schema import EvalConfig
from beameval.core.scoring import metric_keys
from beameval.inference.quota import endpoints_of
from pipeline.local_runner import LOCAL_RUNNER_NAMES

__all__ = ["EXIT_BUDGET", "budget_block", "budget_fields", "budget_left", "costs", "job_config", "worker_processes"]

#: The exit code of a run that stopped at its budget (or lost its shared rate limit's Redis).
EXIT_BUDGET = 5
_VCPUS = re.compile(r"-(\d+)$")


def worker_processes(options: PipelineOptions) -> int | None:
    """W as the runner's options give it (see the module docstring); None when they cannot tell."""
    runner = (options.view_as(StandardOptions).runner or "").lower()
    direct = options.view_as(DirectOptions)
    if runner in LOCAL_RUNNER_NAMES:
        if (direct.direct_running_mode or "in_memory") != "multi_processing":
            return 1
        return direct.direct_num_workers or os.cpu_count() or 1
    if runner == "portablerunner":
        return direct.direct_num_workers or None
    if runner in ("dataflowrunner", "testdataflowrunner"):
        worker = options.view_as(WorkerOptions)
        machines = worker.max_num_workers or worker.num_workers
        if "no_use_multiple_sdk_containers" in (options.view_as(DebugOptions).experiments or []):
            return machines
        vcpus = _VCPUS.search(worker.machine_type or "")
        return machines * int(vcpus.group(1)) if machines and vcpus else None
    return None


def job_config(
    config: EvalConfig, options: PipelineOptions, spent: tuple[float, float], job: JobScope | None = None
) -> EvalConfig:
    """The config the workers get: W resolved, the budget less what was spent before, and the job they belong to."""
    params = config.params
    workers = params.worker_processes or worker_processes(options)
    if workers is None:
        workers = 1
        if _needs_workers(config):
            runner = options.view_as(StandardOptions).runner
            print(
                f"warning: the {runner} runner's options do not say how many worker processes the job has, so "
                "each keeps the whole of every rate_limit and params.budget; set params.worker_processes, or "
                "rate_limit.shared (a Redis every worker draws from), so the job as a whole stays within them.",
                file=sys.stderr,
            )
    update: dict[str, Any] = {"worker_processes": workers, "budget": budget_left(params, spent).budget}
    params = params.model_copy(update=update) if job is None else params.with_job(job, **update)
    return config.model_copy(update={"params": params})


def budget_left(params: Params, spent: tuple[float, float]) -> Params:
    """``params`` with ``params.budget`` less ``spent`` (tokens, dollars): what the job has left to send with.

    Both the preflight's first request and the workers draw from it, so a ``--resume`` of a
    job that spent its budget sends nothing.
    """
    budget = params.budget
    if budget is None or not any(spent):
        return params
    tokens, usd = spent
    left = Budget.model_construct(  # may be 0 or less: then nothing more is sent
        max_tokens=None if budget.max_tokens is None else budget.max_tokens - tokens,
        max_usd=None if budget.max_usd is None else budget.max_usd - usd,
    )
    return params.model_copy(update={"budget": left})


def _needs_workers(config: EvalConfig) -> bool:
    limited = any(
        access.rate_limit is not None and access.rate_limit.shared is None for _, access in endpoints_of(config)
    )
    return limited or config.params.budget is not None


def costs(config: EvalConfig, usage: dict[str, Any]) -> dict[str, Any] | None:
    """``usage.cost_usd``: dollars per endpoint (``target``, ``metric:<key>``) and in total; None without pricing.

    An endpoint in batch mode has a ``batch`` block (``usage.batch`` for the target,
    ``usage.metric_calls.by_metric.<key>.batch`` for a judge) with the tokens answered through
    the Batch API: they cost ``1 - batch_discount`` of the online price, the rest of the
    endpoint's tokens the full price, and ``batch_saving_usd`` says what the discount saved
    on every endpoint together.
    """
    by_endpoint: dict[str, float] = {}
    saving = 0.0
    target = config.target.endpoint.pricing if config.target is not None else None
    if target is not None:
        by_endpoint["target"], saved = _priced(target, usage)
        saving += saved
    calls = (usage.get("metric_calls") or {}).get("by_metric") or {}
    for key, metric in zip(metric_keys(config.metrics), config.metrics, strict=True):
        pricing = next((access.pricing for _, access in endpoints_of(metric) if access.pricing is not None), None)
        if pricing is not None:
            by_endpoint[f"metric:{key}"], saved = _priced(pricing, calls.get(key) or {})
            saving += saved
    batched = "batch" in usage or any("batch" in block for block in calls.values())
    if not by_endpoint:
        return None
    cost: dict[str, Any] = {
        "total": round(sum(by_endpoint.values()), 6),
        "endpoints": {k: round(v, 6) for k, v in by_endpoint.items()},
    }
    if batched:
        cost["batch_saving_usd"] = round(saving, 6)
    return cost


def _priced(pricing: Pricing, tokens: dict[str, Any]) -> tuple[float, float]:
    """One endpoint's cost and its batch saving, from its token counts and its ``batch`` block when it has one."""
    batch = tokens.get("batch") or {}
    batch_in, batch_out = batch.get("prompt_tokens", 0), batch.get("completion_tokens", 0)
    # Batch tokens collected by earlier invocations are cache hits of this one: not in its own counts.
    online_in = max(tokens.get("prompt_tokens", 0) - batch_in, 0)
    online_out = max(tokens.get("completion_tokens", 0) - batch_out, 0)
    discounted = pricing.cost(batch_in, batch_out, batch=True)
    return pricing.cost(online_in, online_out) + discounted, pricing.cost(batch_in, batch_out) - discounted


def budget_fields(
    config: EvalConfig,
    counts: dict[str, int],
    usage: dict[str, Any],
    spent: tuple[float, float],
    job_total: tuple[float, float] | None = None,
    counters: dict[str, int] | None = None,
) -> dict[str, Any]:
    """What results.json says about completion and the budget: ``complete``, ``stopped`` and ``usage.budget``.

    ``usage.budget`` is the job's: ``job_total`` (its ledger, every invocation, target and
    endpoint) when known, else ``spent`` (earlier invocations) and this one's ``usage``.
    ``stopped`` is ``quota_store`` when the run's Beam ``counters`` say rows were skipped because a
    shared rate limit's Redis was lost (``rows_skipped_quota_store``), else ``budget``.
    """
    fields: dict[str, Any] = {"complete": not counts.get("skipped")}
    if counts.get("skipped"):
        fields["stopped"] = "quota_store" if (counters or {}).get("rows_skipped_quota_store") else "budget"
    budget = config.params.budget
    if budget is not None:
        calls = usage.get("metric_calls") or {}
        tokens = sum(block.get(name, 0) for block in (usage, calls) for name in ("prompt_tokens", "completion_tokens"))
        usd = (usage.get("cost_usd") or {}).get("total", 0.0)
        total = job_total if job_total is not None else (spent[0] + tokens, spent[1] + usd)
        usage["budget"] = budget_block(budget, total)
    return fields


def budget_block(budget: Budget, spent: tuple[float, float]) -> dict[str, Any]:
    """``usage.budget``: the caps and what the job spent of them (tokens, dollars)."""
    return {
        "max_tokens": budget.max_tokens,
        "max_usd": budget.max_usd,
        "spent_tokens": round(spent[0]),
        "spent_usd": round(spent[1], 6),
    }
