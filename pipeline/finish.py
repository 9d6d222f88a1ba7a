"""After a run's pipeline: publish its outputs, write results.json, the history line and the report.

Shared by the single-target run (``pipeline.run``) and each target of a multi-target run
(``pipeline.multi``), so a target's folder is finished exactly as a run of it alone.
"""

from __future__ import annotations

import os
import time
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from beameval.cache.journal import JOURNAL_DIR
from beameval.config.cache import StoreUse
from beameval.config.schema import EvalConfig
from beameval.core.console import printable
from beameval.core.errors import EvaluatorError
from beameval.core.scoring import RowScorer
from beameval.inference.batch.ledger import metric_scope
from beameval.outputs.groups import GROUPS_FILE, bound_groups, groups_parquet
from pipeline.cache import publish_run
from pipeline.failures import error_rate_exceeded, failure_breakdown, format_failures, unparsed_judges
from pipeline.history import append_run
from pipeline.job import JobSpend, add_earlier_usage
from pipeline.local_runner import LocalRunner, choose_runner
from pipeline.output_dir import publish_outputs
from pipeline.provenance import build_provenance
from pipeline.quota import budget_fields, costs
from pipeline.report import report_after_run
from pipeline.results import RESULTS_FILE, build_results, read_json, write_file_atomically, write_json_atomically
from pipeline.summary import format_summary_table
from transforms import NAMESPACE
from transforms.batch_endpoint import batch_metrics, batch_usage, uses_batch_mode
from transforms.write import SUMMARY_FILE

__all__ = ["BatchesPending", "RunFailed", "finish_run", "pipeline_metrics", "runner_info"]


class RunFailed(EvaluatorError):
    """Strict mode: a row failed, so the run is not reported as complete."""


class BatchesPending(EvaluatorError):
    """Batch mode: some requests' batches are still running; nothing is published until they are collected."""


def finish_run(
    config: EvalConfig,
    output: str,
    stage: str,
    run_id: str,
    store: StoreUse,
    paths: list[str],
    started: float,
    run_info: dict[str, Any],
    history: str | None,
    spent: tuple[float, float] = (0.0, 0.0),
    job: JobSpend | None = None,
) -> dict[str, Any]:
    """After the pipeline: publish one run's outputs, write its results.json, history line and report.

    A multi-target run calls this once per target, with that target's config and folder.

    ``spent`` is what earlier invocations of a resumed run used of ``params.budget``;
    ``job`` what the whole job spent (its ledger): ``usage`` and ``cost_usd`` then count the
    requests of every invocation, and ``usage.budget`` the job's spend.

    Raises:
        BatchesPending: batch mode, and some batches are still running at the provider.
        RunFailed: strict mode saw a failed row, or more rows failed than ``params.max_error_rate``.
    """
    journal = f"{output.rstrip('/')}/{JOURNAL_DIR}"
    target = batch_usage(journal) if uses_batch_mode(config) else None
    judged: dict[str, dict[str, int]] = {}
    for key, _ in batch_metrics(config.metrics):  # a pairwise judge's swapped order counts as its judge's
        found = batch_usage(journal, metric_scope(key))
        mine = judged.setdefault(key.partition(".")[0], dict.fromkeys(found, 0))
        for name, value in found.items():
            mine[name] = mine.get(name, 0) + value
    scopes = [usage for usage in (target, *judged.values()) if usage is not None]
    if sum([usage.pop("live") for usage in scopes]):
        raise BatchesPending(_pending_message(scopes, output))
    publish_outputs(output, stage, run_id)
    store_warnings = publish_run(output, store)  # even when strict mode fails the run; a failure only warns
    summary = read_json(f"{output.rstrip('/')}/{SUMMARY_FILE}")
    scorer = RowScorer(config.metrics)  # builds every metric once, for results and the judge check
    results = build_results(summary, scorer, config.public_dump(), run_info)
    _batch_usage(results["usage"], target, judged)
    job = job or JobSpend()
    add_earlier_usage(results["usage"], job.earlier)  # every invocation of the job, killed ones too
    results["provenance"] = build_provenance(  # README "Comparing runs": the provenance block
        config.public_dump(), paths, output, run_id, started, time.time(), run_info["runner"]
    )
    _fail_if_strict(config, summary)
    results["failures"] = failure_breakdown(output)
    judges = [key for key, metric in scorer.metrics if metric.config.type == "llm-judge"]
    results["warnings"] = unparsed_judges(results, judges) + store_warnings
    cost = costs(config, results["usage"])
    if cost is not None:
        results["usage"]["cost_usd"] = cost
    results.update(
        budget_fields(config, results["counts"], results["usage"], spent, job.total, run_info.get("counters"))
    )
    over = error_rate_exceeded(results, config.params.max_error_rate)
    results["status"] = "completed" if over is None else "failed"
    if over is None and results.get("stopped"):
        results["status"] = "stopped"
    every_group = bound_groups(results)  # results.json stays small whatever the number of group values
    if every_group is not None:
        write_file_atomically(f"{output.rstrip('/')}/{GROUPS_FILE}", groups_parquet(every_group))
    write_json_atomically(f"{output.rstrip('/')}/{RESULTS_FILE}", results)
    if history and results["status"] == "completed":  # one line in HISTORY/runs.jsonl per completed run
        append_run(history, results, output)
    report_after_run(output, results)  # OUT_DIR/report.html; a failure here only warns
    if over is not None:
        print(
            printable(format_summary_table(results) + format_failures(results["failures"], results["counts"]["rows"]))
        )
        raise RunFailed(over, hint="Look at the most common failures above, or raise params.max_error_rate.")
    return results


def _batch_usage(usage: dict[str, Any], target: dict[str, int] | None, judges: dict[str, dict[str, int]]) -> None:
    """Put each batch-mode endpoint's ``batch`` block (every run of this OUT_DIR together) under its endpoint.

    The target's is ``usage.batch``; a judge's is ``usage.metric_calls.by_metric.<key>.batch``. Their
    tokens are the batch-priced ones (``pipeline.quota.costs``).
    """
    if target is not None:
        usage["batch"] = target
    by_metric = usage["metric_calls"].setdefault("by_metric", {}) if judges else {}
    for key, block in judges.items():  # a judge whose calls were all collected earlier has no counts of its own
        by_metric.setdefault(key, {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0})["batch"] = block


def _pending_message(scopes: list[dict[str, int]], output: str) -> str:
    created, requests = sum(usage["batches"] for usage in scopes), sum(usage["requests"] for usage in scopes)
    return (
        f"batches are still running at the provider ({created} created for {requests} "
        f"requests so far, every one recorded in {output.rstrip('/')}/{JOURNAL_DIR}/batches/); nothing was "
        "published yet. Rerun the same command with --resume to collect what has finished: it exits 75 again "
        "while batches still run, and 0 with complete outputs once all are collected."
    )


def pipeline_metrics(result: beam.runners.runner.PipelineResult) -> dict[str, dict[str, int]]:
    """The run's Beam counters and gauges, for the ``run`` block of results.json.

    Counters: rows read, generated, scored and failed; requests, retries, AIMD decreases, …
    Gauges: the concurrency limit and peak in flight that a worker reported last.
    """
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    except (NotImplementedError, AttributeError, KeyError):  # a runner without metrics (dry run)
        return {"counters": {}, "gauges": {}}
    counters: dict[str, int] = {}
    for counter in found.get("counters", []):  # one name may count in several steps (the preflight's row, targets)
        name = counter.key.metric.name
        counters[name] = counters.get(name, 0) + int(_value(counter))
    gauges = {g.key.metric.name: int(_value(g).value) for g in found.get("gauges", []) if _value(g) is not None}
    return {"counters": counters, "gauges": gauges}


def _value(metric: Any) -> Any:
    return metric.committed if metric.committed is not None else metric.attempted


def runner_info(options: PipelineOptions) -> dict[str, Any]:
    """Which runner ran, and for the local one its mode and worker processes (not just "FnApiRunner")."""
    runner = options.view_as(StandardOptions).runner
    if not isinstance(choose_runner(options), LocalRunner):
        return {"runner": runner}
    direct = options.view_as(DirectOptions)
    mode = direct.direct_running_mode or "in_memory"
    workers = (direct.direct_num_workers or os.cpu_count() or 1) if mode != "in_memory" else 1
    return {"runner": "FnApiRunner", "running_mode": mode, "workers": workers}


def _fail_if_strict(config: EvalConfig, summary: dict[str, Any]) -> None:
    first = summary["first_failure"]
    if first is None or config.params.ignore_request_failure:
        return
    counts = summary["counts"]
    where = {"input": "reading the dataset", "sample_generation": "sample generation", "scoring": "scoring"}
    metric = f" for metric '{first['metric']}'" if first["metric"] else ""
    raise RunFailed(
        f"evaluation failed during {where.get(first['phase'], first['phase'])}{metric} on row "
        f"{first['row_index']}: {first['message']} ({counts['errors']} of {counts['rows']} rows failed"
        + (f", {summary['not_sent']} of them not sent because the run stopped early" if summary["not_sent"] else "")
        + "; rows/ and errors/ hold every row, results.json was not written).",
        hint="Fix the cause, or set params.ignore_request_failure: true to record failed rows as NaN "
        "and complete the run.",
    )
