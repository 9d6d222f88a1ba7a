"""``python -m pipeline.run``: validate, preflight, run the Beam pipeline, write results.json.

Every failure a user can cause ends here as one paragraph on stderr and a non-zero exit
code; ``--debug`` shows the traceback as well.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
import uuid
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

from beameval.cache.journal import JournalWriter
from beameval.compare.verdict import overall_verdict
from beameval.core.console import printable
from beameval.core.errors import EvaluatorError
from beameval.inference.budget import RunBudget
from beameval.inference.engine import InferenceEngine
from pipeline.cache import lookup_shards, run_store_use
from pipeline.cli import check_flags, help_text
from pipeline.compare import EXIT_CODES
from pipeline.config import load_config
from pipeline.decide import run_decided
from pipeline.decide_outputs import decision_exit
from pipeline.failures import format_failures
from pipeline.finish import BatchesPending, RunFailed, finish_run, pipeline_metrics, runner_info
from pipeline.first_answer import HandOff, first_answer, hand_off
from pipeline.graph import build_graph
from pipeline.interrupt import EXIT_INTERRUPTED, InterruptState, interruptible
from pipeline.job import first_paid, job_scope, job_spend, record_job, spent_before
from pipeline.job_record import check_resumed_config, record_job_config
from pipeline.leaderboard import format_leaderboard
from pipeline.local_runner import choose_runner
from pipeline.multi import run_targets
from pipeline.options import EvalOptions, progress_settings
from pipeline.output_dir import (
    full_disk_message,
    lock_output,
    prepare_output,
    refuse_dataset_overlap,
    refuse_live_batches,
    release_output,
    staging_dir,
)
from pipeline.placeholders import resolve_output
from pipeline.preflight import preflight
from pipeline.quota import EXIT_BUDGET, job_config
from pipeline.summary import format_summary_table, unexpected_error, unwrap_pipeline_error
from transforms.progress import watch_progress
from transforms.read import list_dataset_files

__all__ = ["BatchesPending", "RunFailed", "main", "run"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
#: Batch mode: batches are still running at the provider (``EX_TEMPFAIL``); rerun with ``--resume``.
EXIT_BATCHES_PENDING = 75


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
    if flags.decide or flags.baseline:  # evaluate in waves and stop once the verdict is certain (pipeline.decide)
        return run_decided(options, flags, config, run_id)
    if config.targets is not None:  # several targets in one run (pipeline.multi)
        return run_targets(options, flags, config)
    if flags.policy:
        raise EvaluatorError(
            "--policy applies to a run with targets: (its OUT_DIR/comparison.json); a single-target run is "
            "gated by python -m pipeline.compare --policy GATE.yaml."
        )
    limit = flags.limit if flags.limit is not None else config.params.limit_samples
    if limit is not None and limit < 1:
        raise EvaluatorError(f"--limit must be at least 1, got {limit}.")
    paths = list_dataset_files(config.dataset.path, config.dataset.format, config.dataset.split)
    refuse_dataset_overlap(flags.output, config.dataset.path, paths)  # else the run reads its own outputs back
    first_row = None if flags.skip_preflight else preflight(config, paths)  # free checks only
    dry_run = bool(options.view_as(TestOptions).dry_run)  # Beam's --dry_run: build the job, run nothing
    store = run_store_use(config, flags)
    handed, shards, spent = HandOff(), None, (0.0, 0.0)
    scope = job_scope(flags.output, flags.resume and not dry_run)  # the job: kept across --resume
    if not dry_run:  # a dry run sends nothing paid
        lock_output(flags.output, run_id)  # one run at a time per OUT_DIR, until main() releases it
        if flags.resume:  # before anything is sent: the journal answers the config it was started with
            check_resumed_config(flags.output, config)
        refuse_live_batches(config, flags.output, flags.overwrite, flags.resume, flags.cancel_batches)
        first = first_answer(config, first_row, flags.output, flags, store, job=scope.id)  # the first paid request
        prepare_output(flags.output, flags.overwrite, resume=flags.resume)
        if flags.resume:
            spent = spent_before(flags.output, scope)  # a --resume goes on with the same budget
        shards = lookup_shards(config, flags.output, store, flags.resume)  # without the preflight's shard
        handed = hand_off(first, flags.output)  # its answer, into the journal and to GenerateSamples
        record_job(flags.output, scope, *first_paid([(config, handed)]))
        record_job_config(flags.output, config, flags.resume)

    started = time.time()
    runner = choose_runner(options)  # no --runner or DirectRunner: the local engine, which never fetches Prism
    pipeline = beam.Pipeline(runner=runner, options=options)
    stage = staging_dir(flags.output, run_id)  # outputs move into place only when the run has finished
    job = job_config(config, options, handed.spent_after(spent), scope)  # W, the budget left, the job: for the pacers
    build_graph(pipeline, job, paths, flags.output, limit, run_id, shards, stage, handed.reply)
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
        RunBudget.close_all()  # its spend logs, written and closed before the spend is read
    run_info = {
        **runner_info(options),
        **pipeline_metrics(result),
        "wall_time_s": round(time.time() - started, 3),
        "dataset_files": len(paths),
    }
    if dry_run:
        return {"status": "dry_run", "run": run_info}
    spend = job_spend(config, scope)  # every invocation's, from the job's ledger
    return finish_run(config, flags.output, stage, run_id, store, paths, started, run_info, flags.history, spent, spend)


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
        finally:
            release_output()  # OUT_DIR's lock, however the run ended
    if results["status"] == "dry_run":
        print(f"dry run: built the {results['run']['runner']} job; nothing was submitted, run or written.")
        return 0
    if "decision" in results:  # --decide: the verdict is the exit code
        return decision_exit(results)
    if "leaderboard" in results:  # several targets: their scores side by side, then the comparisons
        comparison = results["comparison"]
        print(printable(format_leaderboard(results, comparison)))
        if results["status"] == "stopped":
            print(
                "stopped: the job reached its budget (params.budget, for every target together); rows not sent are "
                "written as skipped in each target's rows/. Rerun the same command with --resume and a larger "
                "params.budget to send only those.",
                file=sys.stderr,
            )
            return EXIT_BUDGET
        if comparison is not None and comparison["policy"]["source"] is not None:  # --policy: a gate, so its code
            return EXIT_CODES[overall_verdict(c["verdict"] for c in comparison["comparisons"])]
        return 0
    for warning in results.get("warnings", []):
        print(printable(f"warning: {warning}"), file=sys.stderr)
    print(printable(format_summary_table(results) + format_failures(results["failures"], results["counts"]["rows"])))
    if results["status"] == "stopped":
        counts = results["counts"]
        why, then = (
            ("lost its shared rate limit's Redis (rate_limit.shared_timeout passed)", "once the Redis answers again")
            if results.get("stopped") == "quota_store"
            else ("reached its budget (params.budget)", "and a larger params.budget")
        )
        print(
            f"stopped: the run {why}: {counts['skipped']} of {counts['rows']} rows were not sent and are written as "
            f"skipped; results.json says complete: false. Rerun the same command with --resume {then} to send only "
            "those.",
            file=sys.stderr,
        )
        return EXIT_BUDGET
    return 0


def _report_failure(exc: Exception, debug: bool) -> int:
    """One paragraph on stderr for a failed run, and its exit code."""
    full = full_disk_message(exc)  # wherever it struck: the journal, rows/, results.json
    if full is not None:
        _traceback_if(debug, exc)
        print(printable(f"error: {full}"), file=sys.stderr)
        return EXIT_FAILED
    if isinstance(exc, RunFailed):
        print(printable(f"error: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    if isinstance(exc, BatchesPending):
        print(printable(f"pending: {exc}"), file=sys.stderr)
        return EXIT_BATCHES_PENDING
    _traceback_if(debug, exc)
    if isinstance(exc, EvaluatorError):
        print(printable(f"error: {unwrap_pipeline_error(exc)}"), file=sys.stderr)
        return EXIT_USAGE
    known = unwrap_pipeline_error(exc)  # a user error Beam wrapped on its way out of a worker
    if known is not None:
        print(printable(f"error: {known}"), file=sys.stderr)
        return EXIT_FAILED
    print(printable(unexpected_error(exc, "evaluation")), file=sys.stderr)
    return EXIT_INTERNAL


def _traceback_if(debug: bool, exc: BaseException) -> None:
    """With --debug, print the traceback of ``exc`` (the message follows it)."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
