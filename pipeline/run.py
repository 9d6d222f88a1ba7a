"""``python -m pipeline.run``: run the job (``pipeline.orchestrate``; ``pipeline.decide`` for ``--decide``).

The flags and config are read here, and the outcome becomes a summary and an exit code.
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

from apache_beam.options.pipeline_options import PipelineOptions

from beameval.compare.verdict import overall_verdict
from beameval.core.console import printable
from beameval.core.errors import EvaluatorError
from pipeline.cli import check_flags, help_text
from pipeline.compare import EXIT_CODES
from pipeline.config import load_config
from pipeline.decide import run_decided
from pipeline.decide_outputs import decision_exit
from pipeline.failures import format_failures
from pipeline.finish import BatchesPending, RunFailed
from pipeline.interrupt import EXIT_INTERRUPTED, InterruptState, interruptible
from pipeline.leaderboard import format_leaderboard
from pipeline.options import EvalOptions
from pipeline.orchestrate import run_job
from pipeline.output_dir import full_disk_message, release_output
from pipeline.placeholders import resolve_output
from pipeline.quota import EXIT_BUDGET
from pipeline.summary import format_summary_table, unexpected_error, unwrap_pipeline_error

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
    return run_job(options, flags, config, run_id)  # one target or several (pipeline.orchestrate)


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
