"""``python -m pipeline.run``: validate, preflight, run the Beam pipeline, write results.json.

Every failure a user can cause ends here as one paragraph on stderr and a non-zero exit
code; ``--debug`` shows the traceback as well.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
import uuid
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions

from beameval.config import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.scoring import RowScorer
from beameval.inference.engine import InferenceEngine
from pipeline.config import load_config
from pipeline.graph import build_graph
from pipeline.options import EvalOptions
from pipeline.output_dir import prepare_output
from pipeline.preflight import preflight
from pipeline.report import format_summary_table, unwrap_pipeline_error
from pipeline.results import RESULTS_FILE, build_results, read_json, write_json_atomically
from transforms import NAMESPACE
from transforms.read import list_dataset_files
from transforms.write import SUMMARY_FILE

__all__ = ["RunFailed", "main", "run"]

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
    options = PipelineOptions(argv)
    flags = options.view_as(EvalOptions)
    if not flags.config or not flags.output:
        raise EvaluatorError(
            "both --config and --output are required: "
            "python -m pipeline.run --config EVAL.yaml --output OUT_DIR [--limit N] [Beam options]."
        )
    config = load_config(flags.config)
    limit = flags.limit if flags.limit is not None else config.params.limit_samples
    if limit is not None and limit < 1:
        raise EvaluatorError(f"--limit must be at least 1, got {limit}.")
    paths = list_dataset_files(config.dataset.path)
    if not flags.skip_preflight:
        preflight(config, paths)
    dry_run = bool(options.view_as(TestOptions).dry_run)  # Beam's --dry_run: build the job, run nothing
    if not dry_run:
        prepare_output(flags.output, flags.overwrite)

    started = time.time()
    runner = None if options.view_as(StandardOptions).runner else _local_runner()
    pipeline = beam.Pipeline(runner=runner, options=options)
    build_graph(pipeline, config, paths, flags.output, limit, run_id=uuid.uuid4().hex)
    try:
        result = pipeline.run()
        result.wait_until_finish()
    finally:
        # Workers that ran in this process leave their engines behind; close them so the next run
        # here (tests, notebooks) starts with fresh connections and a full concurrency limit.
        InferenceEngine.close_all()
    run_info = {
        "runner": options.view_as(StandardOptions).runner or "FnApiRunner",
        **_metrics(result),
        "wall_time_s": round(time.time() - started, 3),
        "dataset_files": len(paths),
    }
    if dry_run:
        return {"status": "dry_run", "run": run_info}
    summary = read_json(f"{flags.output.rstrip('/')}/{SUMMARY_FILE}")
    results = build_results(summary, RowScorer(config.metrics), config.public_dump(), run_info)
    _fail_if_strict(config, summary)
    write_json_atomically(f"{flags.output.rstrip('/')}/{RESULTS_FILE}", results)
    return results


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


def _local_runner() -> beam.runners.PipelineRunner:
    """The FnApiRunner: Beam's local engine, which never tries to download Prism."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return FnApiRunner()


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
    debug = "--debug" in argv
    logging.basicConfig(level=logging.INFO if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not debug:
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    try:
        results = run(argv)
    except RunFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except EvaluatorError as exc:
        _traceback_if(debug)
        print(f"error: {unwrap_pipeline_error(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no raw tracebacks
        _traceback_if(debug)
        known = unwrap_pipeline_error(exc)
        if known is not None:
            print(f"error: {known}", file=sys.stderr)
            return EXIT_FAILED
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        print(
            f"error: the evaluation stopped unexpectedly: {type(exc).__name__}: {first_line}. "
            "Rerun with --debug for the full traceback and report it if the cause is not in your config or data.",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    if results["status"] == "dry_run":
        print(f"dry run: built the {results['run']['runner']} job; nothing was submitted, run or written.")
        return 0
    print(format_summary_table(results))
    return 0


def _traceback_if(debug: bool) -> None:
    """With --debug, print the traceback of the exception being handled (the message follows it)."""
    if debug:
        traceback.print_exc(file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
