"""The job: every invocation on one OUT_DIR, every target, worker and endpoint of it, with one id and one bill.

Its id is kept in ``OUT_DIR/_responses/job.json`` (``--resume`` keeps it, ``--overwrite``
starts a new one) and names the shared limits in Redis and every worker's budget,
whatever target, judge or metric asks (``job_config`` hands it to the workers). Its spend
is in its ledger (``beameval.inference.spend_ledger``), recorded as it happens: a
``--resume`` continues from what every earlier invocation spent, killed ones included,
and its ``results.json`` counts their requests in ``usage`` and ``cost_usd``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beameval.cache.files import is_remote
from beameval.cache.journal import JOURNAL_DIR
from beameval.config.params import JobScope
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.sanitize import RowTooLarge
from beameval.core.scoring import metric_keys
from beameval.inference.answers import checked_reply
from beameval.inference.batch.ledger import LEDGER_DIR, live_holds
from beameval.inference.spend_ledger import (
    SPEND_DIR,
    endpoint_label,
    hold_for_invocation,
    record_spent,
    spent_in,
    usage_before,
)
from beameval.inference.targets import make_handler
from beameval.metrics.base import EndpointMetric
from beameval.metrics.registry import metric_class, resolve
from pipeline.first_answer import HandOff

__all__ = [
    "JobSpend",
    "add_earlier_usage",
    "endpoint_labels",
    "first_paid",
    "job_scope",
    "job_spend",
    "record_job",
    "spent_before",
]

#: The job's id, in the journal (kept by ``--resume``, removed by ``--overwrite``).
JOB_FILE = "job.json"


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


def hold_live_batches(outputs: Iterable[str], job: JobScope) -> tuple[float, float]:
    """Hold again what the batches still running hold of the job's budget (their estimates), in every output.

    Each batch's estimate is held from its submission until its answers are collected, and
    a ``--resume`` may collect batches an earlier invocation submitted. With the job's
    ledger the holds go into this invocation's leases before any worker starts, and the
    process that collects a batch settles its hold. Without one (a remote OUT_DIR) the
    driver counts them as spent: held until the run ends. Returns what they hold.
    """
    from transforms.cache import files_for  # the record may be on a remote file system

    folders = [FileSystems.join(output, JOURNAL_DIR, LEDGER_DIR) for output in dict.fromkeys(outputs)]
    holds = [live_holds(folder, files_for(folder)) for folder in folders]
    held = sum(tokens for tokens, _usd in holds), sum(usd for _tokens, usd in holds)
    if job.spend is not None:
        hold_for_invocation(job.spend, job.invocation, *held)
    return held


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
