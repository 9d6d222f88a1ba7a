"""``python -m pipeline.run``: validate, preflight, run the Beam pipeline, write results.json.

Every failure a user can cause ends here as one paragraph on stderr and a non-zero exit
code; ``--debug`` shows the traceback as well.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
import uuid
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions, TestOptions

from beameval.cache.journal import JOURNAL_DIR, JournalWriter
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.scoring import RowScorer
from beameval.inference.engine import InferenceEngine
from pipeline.cache import lookup_shards, publish_run, run_store_use
from pipeline.cli import check_flags, help_text
from pipeline.config import load_config
from pipeline.failures import error_rate_exceeded, failure_breakdown, format_failures, unparsed_judges
from pipeline.graph import build_graph
from pipeline.history import append_run
from pipeline.interrupt import EXIT_INTERRUPTED, InterruptState, interruptible
from pipeline.local_runner import choose_runner
from pipeline.options import EvalOptions, progress_settings
from pipeline.output_dir import prepare_output, publish_outputs, staging_dir
from pipeline.placeholders import resolve_output
from pipeline.preflight import preflight
from pipeline.provenance import build_provenance
from pipeline.quota import EXIT_BUDGET, budget_fields, costs, job_config, spent_before
from pipeline.report import report_after_run
from pipeline.results import RESULTS_FILE, build_results, read_json, write_json_atomically
from pipeline.summary import format_summary_table, unexpected_error, unwrap_pipeline_error
from transforms import NAMESPACE
from transforms.batch import batch_usage, uses_batch_mode
from transforms.progress import watch_progress
from transforms.read import list_dataset_files
from transforms.write import SUMMARY_FILE

__all__ = ["BatchesPending", "RunFailed", "main", "run"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
#: Batch mode: batches are still running at the provider (``EX_TEMPFAIL``); rerun with ``--resume``.
EXIT_BATCHES_PENDING = 75


class RunFailed(EvaluatorError):
    """Strict mode: a row failed, so the run is not reported as complete."""


class BatchesPending(EvaluatorError):
    """Batch mode: some requests' batches are still running; nothing is published until they are collected."""


def run(argv: list[str], interrupt: InterruptState | None = None) -> dict[str, Any]:
    """Run one evaluation; return the results document.

    Raises:
        EvaluatorError: anything a user can fix (config, data, endpoint, output, failed rows).
    """
    check_flags(argv)
    options = PipelineOptions(argv)
    flags = options.view_as(EvalOptions)
    if not flags.config or not flags.output:
        raise EvaluatorError(
            "both --config and --output are required: "
            "python -m pipeline.run --config EVAL.yaml --output OUT_DIR [--limit N] [Beam options]."
        )
    run_id = uuid.uuid4().hex  # one id for the workers and for provenance
    flags.output = resolve_output(flags.output, run_id, time.time())  # {run_date}, {run_id}: fixed once, here
    if interrupt is not None:
        interrupt.output = flags.output
    config = load_config(flags.config)
    limit = flags.limit if flags.limit is not None else config.params.limit_samples
    if limit is not None and limit < 1:
        raise EvaluatorError(f"--limit must be at least 1, got {limit}.")
    paths = list_dataset_files(config.dataset.path)
    if not flags.skip_preflight:
        preflight(config, paths)
    dry_run = bool(options.view_as(TestOptions).dry_run)  # Beam's --dry_run: build the job, run nothing
    if not dry_run:
        prepare_output(flags.output, flags.overwrite, resume=flags.resume)
    spent = spent_before(flags.output) if flags.resume else (0.0, 0.0)  # a --resume goes on with the same budget
    store = run_store_use(config, flags)
    shards = None if dry_run else lookup_shards(config, flags.output, store, flags.resume)

    started = time.time()
    runner = choose_runner(options)  # no --runner or DirectRunner: the local engine, which never fetches Prism
    pipeline = beam.Pipeline(runner=runner, options=options)
    stage = staging_dir(flags.output, run_id)  # outputs move into place only when the run has finished
    job = job_config(config, options, spent)  # worker count and budget left, for the workers' pacers
    build_graph(pipeline, job, paths, flags.output, limit, run_id=run_id, stored_shards=shards, stage=stage)
    interval, _, local = progress_settings(options)
    try:
        with watch_progress(run_id, interval if local else 0.0):  # one bar or line for the run (issue 16)
            result = pipeline.run()
            result.wait_until_finish()
    finally:
        # Workers that ran in this process leave their engines behind; close them so the next run
        # here (tests, notebooks) starts with fresh connections and a full concurrency limit.
        InferenceEngine.close_all()
        JournalWriter.close_all()  # the responses of this process's workers, flushed and closed
    run_info = {
        **_runner_info(options),
        **_metrics(result),
        "wall_time_s": round(time.time() - started, 3),
        "dataset_files": len(paths),
    }
    if dry_run:
        return {"status": "dry_run", "run": run_info}
    batches = batch_usage(f"{flags.output.rstrip('/')}/{JOURNAL_DIR}") if uses_batch_mode(config) else None
    if batches is not None and batches.pop("live"):
        raise BatchesPending(_pending_message(batches, flags.output))
    publish_outputs(flags.output, stage, run_id)
    publish_run(flags.output, store)  # paid-for responses go to the store even when strict mode fails the run
    summary = read_json(f"{flags.output.rstrip('/')}/{SUMMARY_FILE}")
    scorer = RowScorer(config.metrics)  # builds every metric once, for results and the judge check
    results = build_results(summary, scorer, config.public_dump(), run_info)
    if batches is not None:  # every run of this OUT_DIR together; the tokens are the batch-priced ones
        results["usage"]["batch"] = batches
    results["provenance"] = build_provenance(  # README "Comparing runs": the provenance block
        config.public_dump(), paths, flags.output, run_id, started, time.time(), run_info["runner"]
    )
    _fail_if_strict(config, summary)
    results["failures"] = failure_breakdown(flags.output)
    judges = [key for key, metric in scorer.metrics if metric.config.type == "llm-judge"]
    results["warnings"] = unparsed_judges(results, judges)
    cost = costs(config, results["usage"])
    if cost is not None:
        results["usage"]["cost_usd"] = cost
    results.update(budget_fields(config, results["counts"], results["usage"], spent))
    over = error_rate_exceeded(results, config.params.max_error_rate)
    results["status"] = "completed" if over is None else "failed"
    if over is None and results.get("stopped"):
        results["status"] = "stopped"
    write_json_atomically(f"{flags.output.rstrip('/')}/{RESULTS_FILE}", results)
    if flags.history and results["status"] == "completed":  # one line in HISTORY/runs.jsonl per completed run
        append_run(flags.history, results, flags.output)
    report_after_run(flags.output, results)  # OUT_DIR/report.html (issue 16); a failure here only warns
    if over is not None:
        print(format_summary_table(results) + format_failures(results["failures"], results["counts"]["rows"]))
        raise RunFailed(over, hint="Look at the most common failures above, or raise params.max_error_rate.")
    return results


def _pending_message(batches: dict[str, int], output: str) -> str:
    return (
        f"batches are still running at the provider ({batches['batches']} created for {batches['requests']} "
        f"requests so far, every one recorded in {output.rstrip('/')}/{JOURNAL_DIR}/batches/); nothing was "
        "published yet. Rerun the same command with --resume to collect what has finished: it exits 75 again "
        "while batches still run, and 0 with complete outputs once all are collected."
    )


def _metrics(result: beam.runners.runner.PipelineResult) -> dict[str, dict[str, int]]:
    """The run's Beam counters and gauges, for the ``run`` block of results.json.

    Counters: rows read, generated, scored and failed; requests, retries, AIMD decreases, …
    Gauges: the concurrency limit and peak in flight that a worker reported last.
    """
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    except (NotImplementedError, AttributeError, KeyError):  # a runner without metrics (dry run)
        return {"counters": {}, "gauges": {}}
    counters = {c.key.metric.name: int(_value(c)) for c in found.get("counters", [])}
    gauges = {g.key.metric.name: int(_value(g).value) for g in found.get("gauges", []) if _value(g) is not None}
    return {"counters": counters, "gauges": gauges}


def _value(metric: Any) -> Any:
    return metric.committed if metric.committed is not None else metric.attempted


def _runner_info(options: PipelineOptions) -> dict[str, Any]:
    """Which runner ran, and for the local one its mode and worker processes (not just "FnApiRunner")."""
    runner = options.view_as(StandardOptions).runner
    if choose_runner(options) is None:
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


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(help_text())
        return 0
    if "--print_config_schema" in argv:
        from beameval.config.reference import config_markdown, config_schema

        sys.stdout.write(config_markdown() if "--markdown" in argv else json.dumps(config_schema(), indent=2) + "\n")
        return 0
    debug = "--debug" in argv
    logging.basicConfig(level=logging.INFO if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not debug:
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    with interruptible(quiet=not debug) as interrupt:
        try:
            results = run(argv, interrupt)
        except (Exception, KeyboardInterrupt) as exc:
            if interrupt.signal_name is None and isinstance(exc, Exception):
                return _report_failure(exc, debug)
            _traceback_if(debug, exc)
            how = "Ctrl-C" if interrupt.signal_name in (None, "SIGINT") else interrupt.signal_name
            journal = f"{interrupt.output.rstrip('/')}/_responses/" if interrupt.output else "the output's _responses/"
            print(
                f"interrupted: the evaluation was stopped ({how}) before it completed; results.json was not written. "
                "Run the same command with --resume to continue: responses already received are kept in "
                f"{journal} and are not sent again.",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
    if results["status"] == "dry_run":
        print(f"dry run: built the {results['run']['runner']} job; nothing was submitted, run or written.")
        return 0
    for warning in results.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    print(format_summary_table(results) + format_failures(results["failures"], results["counts"]["rows"]))
    if results["status"] == "stopped":
        counts = results["counts"]
        print(
            f"stopped: the run reached its budget (params.budget): {counts['skipped']} of {counts['rows']} rows were "
            "not sent and are written as skipped; results.json says complete: false. Rerun the same command with "
            "--resume and a larger params.budget to send only those.",
            file=sys.stderr,
        )
        return EXIT_BUDGET
    return 0


def _report_failure(exc: Exception, debug: bool) -> int:
    """One paragraph on stderr for a failed run, and its exit code."""
    if isinstance(exc, RunFailed):
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if isinstance(exc, BatchesPending):
        print(f"pending: {exc}", file=sys.stderr)
        return EXIT_BATCHES_PENDING
    _traceback_if(debug, exc)
    if isinstance(exc, EvaluatorError):
        print(f"error: {unwrap_pipeline_error(exc)}", file=sys.stderr)
        return EXIT_USAGE
    known = unwrap_pipeline_error(exc)  # a user error Beam wrapped on its way out of a worker
    if known is not None:
        print(f"error: {known}", file=sys.stderr)
        return EXIT_FAILED
    print(unexpected_error(exc, "evaluation"), file=sys.stderr)
    return EXIT_INTERNAL


def _traceback_if(debug: bool, exc: BaseException) -> None:
    """With --debug, print the traceback of ``exc`` (the message follows it)."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
