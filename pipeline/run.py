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

from beameval.cache.journal import JournalWriter
from beameval.config.cache import StoreUse
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
from pipeline.interrupt import EXIT_INTERRUPTED, interruptible
from pipeline.leaderboard import format_leaderboard
from pipeline.local_runner import choose_runner
from pipeline.options import EvalOptions, progress_settings
from pipeline.output_dir import prepare_output, publish_outputs, staging_dir
from pipeline.placeholders import resolve_output
from pipeline.preflight import preflight
from pipeline.provenance import build_provenance
from pipeline.report import report_after_run
from pipeline.results import RESULTS_FILE, build_results, read_json, write_json_atomically
from pipeline.summary import format_summary_table, unexpected_error, unwrap_pipeline_error
from transforms import NAMESPACE
from transforms.progress import watch_progress
from transforms.read import list_dataset_files
from transforms.write import SUMMARY_FILE

__all__ = ["RunFailed", "finish_run", "main", "pipeline_metrics", "run", "runner_info"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class RunFailed(EvaluatorError):
    """Strict mode: a row failed, so the run is not reported as complete."""


def run(argv: list[str]) -> dict[str, Any]:
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
    config = load_config(flags.config)
    if config.targets is not None:  # several targets in one run: pipeline.multi builds on this module
        from pipeline.multi import run_targets

        return run_targets(options, flags, config)
    if flags.policy:
        raise EvaluatorError(
            "--policy applies to a run with targets: (its OUT_DIR/comparison.json); a single-target run is "
            "gated by python -m pipeline.compare --policy GATE.yaml."
        )
    limit = flags.limit if flags.limit is not None else config.params.limit_samples
    if limit is not None and limit < 1:
        raise EvaluatorError(f"--limit must be at least 1, got {limit}.")
    paths = list_dataset_files(config.dataset.path)
    if not flags.skip_preflight:
        preflight(config, paths)
    dry_run = bool(options.view_as(TestOptions).dry_run)  # Beam's --dry_run: build the job, run nothing
    if not dry_run:
        prepare_output(flags.output, flags.overwrite, resume=flags.resume)
    store = run_store_use(config, flags)
    shards = None if dry_run else lookup_shards(config, flags.output, store, flags.resume)

    started = time.time()
    runner = choose_runner(options)  # no --runner or DirectRunner: the local engine, which never fetches Prism
    pipeline = beam.Pipeline(runner=runner, options=options)
    stage = staging_dir(flags.output, run_id)  # outputs move into place only when the run has finished
    build_graph(pipeline, config, paths, flags.output, limit, run_id=run_id, stored_shards=shards, stage=stage)
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
        **runner_info(options),
        **pipeline_metrics(result),
        "wall_time_s": round(time.time() - started, 3),
        "dataset_files": len(paths),
    }
    if dry_run:
        return {"status": "dry_run", "run": run_info}
    return finish_run(config, flags.output, stage, run_id, store, paths, started, run_info, flags.history)


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
) -> dict[str, Any]:
    """After the pipeline: publish one run's outputs, write its results.json, history line and report.

    A multi-target run calls this once per target, with that target's config and folder.

    Raises:
        RunFailed: strict mode saw a failed row, or more rows failed than ``params.max_error_rate``.
    """
    publish_outputs(output, stage, run_id)
    publish_run(output, store)  # paid-for responses go to the store even when strict mode fails the run
    summary = read_json(f"{output.rstrip('/')}/{SUMMARY_FILE}")
    scorer = RowScorer(config.metrics)  # builds every metric once, for results and the judge check
    results = build_results(summary, scorer, config.public_dump(), run_info)
    results["provenance"] = build_provenance(  # CONTRACT.md "Provenance and run history"
        config.public_dump(), paths, output, run_id, started, time.time(), run_info["runner"]
    )
    _fail_if_strict(config, summary)
    results["failures"] = failure_breakdown(output)
    judges = [key for key, metric in scorer.metrics if metric.config.type == "llm-judge"]
    results["warnings"] = unparsed_judges(results, judges)
    over = error_rate_exceeded(results, config.params.max_error_rate)
    results["status"] = "completed" if over is None else "failed"
    write_json_atomically(f"{output.rstrip('/')}/{RESULTS_FILE}", results)
    if history:  # one line in HISTORY/runs.jsonl per completed run
        append_run(history, results, output)
    report_after_run(output, results)  # OUT_DIR/report.html (issue 16); a failure here only warns
    if over is not None:
        print(format_summary_table(results) + format_failures(results["failures"], results["counts"]["rows"]))
        raise RunFailed(over, hint="Look at the most common failures above, or raise params.max_error_rate.")
    return results


def pipeline_metrics(result: beam.runners.runner.PipelineResult) -> dict[str, dict[str, int]]:
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


def runner_info(options: PipelineOptions) -> dict[str, Any]:
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
            results = run(argv)
        except (Exception, KeyboardInterrupt) as exc:
            if interrupt.signal_name is None and isinstance(exc, Exception):
                return _report_failure(exc, debug)
            _traceback_if(debug, exc)
            how = "Ctrl-C" if interrupt.signal_name in (None, "SIGINT") else interrupt.signal_name
            print(
                f"interrupted: the evaluation was stopped ({how}) before it completed; results.json was not written. "
                "Run the same command with --resume to continue: responses already received are kept in "
                "OUT_DIR/_responses/ and are not sent again.",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
    if results["status"] == "dry_run":
        print(f"dry run: built the {results['run']['runner']} job; nothing was submitted, run or written.")
        return 0
    if "leaderboard" in results:  # several targets: their scores side by side, then the comparisons
        print(format_leaderboard(results, results["comparison"]))
        return 0
    for warning in results.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    print(format_summary_table(results) + format_failures(results["failures"], results["counts"]["rows"]))
    return 0


def _report_failure(exc: Exception, debug: bool) -> int:
    """One paragraph on stderr for a failed run, and its exit code."""
    if isinstance(exc, RunFailed):
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
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
