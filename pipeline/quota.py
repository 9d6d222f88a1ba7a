"""The job-level side of quotas: the job's id and ledger, worker count, budget left, costs, a stopped run's fields.

A job is every invocation on one OUT_DIR: its id is kept in ``OUT_DIR/_responses/job.json``
(so ``--resume`` keeps it and ``--overwrite`` starts a new one) and names the shared
limits in Redis and every worker's budget, whatever target, judge or metric asks. Its
spend is in its ledger (``beameval.inference.spend_ledger``), recorded as it happens:
a ``--resume`` continues from what every earlier invocation spent, killed ones included.

W, the worker processes that each keep R/W, T/W and 1/W of the budget (``params.worker_processes``
when set, else from the runner's options):

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

import json
import os
import re
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    DebugOptions,
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)

from beameval.cache.files import is_remote
from beameval.cache.journal import JOURNAL_DIR
from beameval.config.params import JobScope
from beameval.config.quota import Budget, Pricing
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.sanitize import RowTooLarge
from beameval.core.scoring import metric_keys
from beameval.inference.answers import checked_reply
from beameval.inference.quota import endpoints_of
from beameval.inference.spend_ledger import SPEND_DIR, endpoint_label, record_spent, spent_in, usage_before
from beameval.inference.targets import make_handler
from beameval.metrics.base import EndpointMetric
from beameval.metrics.registry import metric_class, resolve
from pipeline.first_answer import HandOff
from pipeline.local_runner import LOCAL_RUNNER_NAMES

__all__ = [
    "EXIT_BUDGET",
    "JobSpend",
    "add_earlier_usage",
    "budget_fields",
    "costs",
    "endpoint_labels",
    "first_paid",
    "job_config",
    "job_scope",
    "job_spend",
    "record_job",
    "spent_before",
    "worker_processes",
]

#: The exit code of a run that stopped at its budget.
EXIT_BUDGET = 5
#: The job's id, in the journal (kept by ``--resume``, removed by ``--overwrite``).
JOB_FILE = "job.json"
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


def job_scope(output: str, resume: bool) -> JobScope:
    """The job that this invocation on ``output`` belongs to: the one in its journal on ``--resume``, else a new one."""
    journal = f"{output.rstrip('/')}/{JOURNAL_DIR}"
    job = None
    if resume:
        try:
            job = str(json.loads(_read(f"{journal}/{JOB_FILE}"))["id"])
        except (OSError, ValueError, KeyError, TypeError):  # none yet (a run killed before it wrote one)
            job = None
    spend = None if is_remote(output) else os.path.join(journal, SPEND_DIR)
    return JobScope(id=job or uuid.uuid4().hex, invocation=uuid.uuid4().hex, spend=spend)


def record_job(
    output: str, job: JobScope, paid: tuple[float, float] = (0.0, 0.0), endpoints: dict[str, list[int]] | None = None
) -> None:
    """Write the job's id into ``output``'s journal (prepared by now), and what the driver ``paid`` into its ledger.

    ``endpoints``: the driver's requests (the preflight's), per endpoint label: requests,
    prompt and completion tokens.
    """
    path = FileSystems.join(output, JOURNAL_DIR, JOB_FILE)
    if not FileSystems.exists(path):
        with FileSystems.create(path) as handle:
            handle.write(json.dumps({"id": job.id}).encode("utf-8"))
    if job.spend is not None:
        record_spent(job.spend, job.invocation, *paid, endpoints or {})


def first_paid(answers: list[tuple[EvalConfig, HandOff]]) -> tuple[tuple[float, float], dict[str, list[int]]]:
    """What the preflights' requests (one per target) cost: tokens and dollars, and per endpoint for the ledger."""
    tokens, usd = sum(handed.tokens for _, handed in answers), sum(handed.usd for _, handed in answers)
    endpoints: dict[str, list[int]] = {}
    for config, handed in answers:
        if handed.reply is None:
            continue
        sample = handed.reply.outcome.sample
        label = endpoint_labels(config).get("target")
        if label is not None and sample is not None:
            try:
                checked = checked_reply(sample)  # the reply's counts, as the row that takes it reports them
            except RowTooLarge:
                continue
            counts = endpoints.setdefault(label, [0, 0, 0])
            counts[0] += 1
            counts[1] += checked.prompt_tokens or 0
            counts[2] += checked.completion_tokens or 0
    return (tokens, usd), endpoints


@dataclass(frozen=True)
class JobSpend:
    """What the job spent beyond this invocation's own rows, for ``results.json``.

    Attributes:
        total: tokens and dollars of every invocation, worker and endpoint (None: no ledger).
        earlier: per usage block (``target``, ``metric:<key>``), the requests, prompt and
            completion tokens that earlier invocations sent (killed ones included).

    """

    total: tuple[float, float] | None = None
    earlier: dict[str, list[int]] = field(default_factory=dict)


def endpoint_labels(config: EvalConfig) -> dict[str, str]:
    """Each endpoint of a single-target config by its usage block (``target``, ``metric:<key>``): its ledger label."""
    labels = {}
    try:
        if config.target is not None:
            handler = make_handler(config.target, config.params, config.target.api_key())
            labels["target"] = endpoint_label(handler.endpoint_key)
        for key, metric in zip(metric_keys(config.metrics), config.metrics, strict=True):
            if issubclass(metric_class(metric.type), EndpointMetric):
                built = resolve(metric, key)
                assert isinstance(built, EndpointMetric)
                labels[f"metric:{key}"] = endpoint_label(built.endpoint_handler().endpoint_key)
    except EvaluatorError:  # a key variable gone since the run started: its usage stays this invocation's
        pass
    return labels


def job_spend(config: EvalConfig, job: JobScope, shared: frozenset[str] = frozenset()) -> JobSpend:
    """The job's spend from its ledger: in all, and what earlier invocations sent to ``config``'s endpoints.

    ``shared``: labels of endpoints that other targets used too (a judge every target
    shares): their earlier requests cannot be told apart per target, so they are left out.
    """
    if job.spend is None:
        return JobSpend()
    before = usage_before(job.spend, job.invocation)
    labels = endpoint_labels(config).items()
    earlier = {block: before[label] for block, label in labels if label in before and label not in shared}
    return JobSpend(spent_in(job.spend), earlier)


def add_earlier_usage(usage: dict[str, Any], earlier: dict[str, list[int]]) -> None:
    """Fold the earlier invocations' requests and tokens into this one's ``usage`` (results.json's)."""
    for block, (requests, prompt, completion) in earlier.items():
        if block == "target":
            targets = [usage]
        else:
            calls = usage.setdefault("metric_calls", {})
            by_metric = calls.setdefault("by_metric", {})
            targets = [calls, by_metric.setdefault(block.removeprefix("metric:"), {})]
        for target in targets:
            target["requests"] = target.get("requests", 0) + requests
            target["prompt_tokens"] = target.get("prompt_tokens", 0) + prompt
            target["completion_tokens"] = target.get("completion_tokens", 0) + completion


def _read(path: str) -> str:
    with FileSystems.open(path) as handle:
        return str(handle.read().decode("utf-8"))


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
    update: dict[str, Any] = {"worker_processes": workers}
    budget = params.budget
    if budget is not None and any(spent):
        tokens, usd = spent
        update["budget"] = Budget.model_construct(  # may be 0 or less: then nothing more is sent
            max_tokens=None if budget.max_tokens is None else budget.max_tokens - tokens,
            max_usd=None if budget.max_usd is None else budget.max_usd - usd,
        )
    params = params.model_copy(update=update) if job is None else params.with_job(job, **update)
    return config.model_copy(update={"params": params})


def _needs_workers(config: EvalConfig) -> bool:
    limited = any(
        access.rate_limit is not None and access.rate_limit.shared is None for _, access in endpoints_of(config)
    )
    return limited or config.params.budget is not None


def spent_before(output: str, job: JobScope | None = None) -> tuple[float, float]:
    """Tokens and dollars the job spent before this invocation (what a ``--resume`` has used of its budget).

    From the job's ledger, which records spend as it happens (a killed invocation's too);
    without one (a remote OUT_DIR), from the earlier invocation's results.json.
    """
    if job is not None and job.spend is not None:
        return spent_in(job.spend)
    path = FileSystems.join(output, "results.json")
    if not FileSystems.exists(path):
        return 0.0, 0.0
    from pipeline.results import read_json

    try:
        budget = (read_json(path).get("usage") or {}).get("budget") or {}
        return float(budget.get("spent_tokens") or 0), float(budget.get("spent_usd") or 0)
    except (ValueError, OSError, AttributeError, TypeError):
        return 0.0, 0.0


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
) -> dict[str, Any]:
    """What results.json says about completion and the budget: ``complete``, ``stopped`` and ``usage.budget``.

    ``usage.budget`` is the job's: ``job_total`` (its ledger, every invocation, target and
    endpoint) when known, else ``spent`` (earlier invocations) and this one's ``usage``.
    """
    fields: dict[str, Any] = {"complete": not counts.get("skipped")}
    if counts.get("skipped"):
        fields["stopped"] = "budget"
    budget = config.params.budget
    if budget is not None:
        calls = usage.get("metric_calls") or {}
        tokens = sum(block.get(name, 0) for block in (usage, calls) for name in ("prompt_tokens", "completion_tokens"))
        usd = (usage.get("cost_usd") or {}).get("total", 0.0)
        total = job_total if job_total is not None else (spent[0] + tokens, spent[1] + usd)
        usage["budget"] = {
            "max_tokens": budget.max_tokens,
            "max_usd": budget.max_usd,
            "spent_tokens": round(total[0]),
            "spent_usd": round(total[1], 6),
        }
    return fields
