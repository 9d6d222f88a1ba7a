"""``python -m pipeline.compare``: pair two runs' rows in Beam, test every score, gate the release.

    python -m pipeline.compare --baseline OUT_A|latest|previous --candidate OUT_B --output CMP_DIR
                               [--key FIELD] [--policy GATE.yaml] [--history DIR] [--group_by FIELD]
                               [Beam options]

Writes ``CMP_DIR/comparison.json``, ``CMP_DIR/flips.jsonl`` (the pairs whose scores changed,
both outputs side by side) and ``CMP_DIR/report.html``. Exit codes: 0 GO, 1 NO-GO,
4 INCONCLUSIVE, 2 a usage, config or input error, 3 an internal error. The decision rule is
``beameval.compare.gate``; this module is the command: it reads the runs and picks the baseline
(``pipeline.compare_runs``), runs the Beam join that produces the sums (overall, ``ok_rate``
and per group) and builds the document (``pipeline.compare_pair``), and records the verdict in
``--history``.
``--baseline latest`` picks the most recent accepted run in ``--history`` with the
candidate's ``eval_hash`` (``previous``: the most recent, accepted or not); with none, there
is nothing to compare and the exit code is 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beameval.compare.gate import gate_comparison
from beameval.compare.messages import verdict_message
from beameval.compare.runs import BASELINE_CHOICES
from beameval.core.errors import ConfigError, OutputError
from pipeline.cli import check_flags
from pipeline.compare_pair import (
    check_datasets,
    comparison_document,
    flips_counted,
    gate_input,
    load_policy,
    pair_rows,
    plan_pair,
    refuse_bad_keys,
    take_tally,
)
from pipeline.compare_runs import (
    NoBaseline,
    check_recorded_run,
    config_level,
    load_run,
    record_verdict,
    resolve_baseline,
    run_id,
)
from pipeline.history import load_history
from pipeline.local_runner import choose_runner
from pipeline.report import COMPARISON_FILE, FLIPS_FILE, write_comparison_report
from pipeline.results import write_json_atomically
from pipeline.summary import unexpected_error, unwrap_pipeline_error
from transforms.pair import ROW_INDEX

__all__ = ["EXIT_CODES", "NoBaseline", "compare", "format_table", "main"]

_TALLY_FILE = "_tally.json"
EXIT_CODES = {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 4}
EXIT_USAGE = 2
EXIT_INTERNAL = 3
_USAGE = (
    "python -m pipeline.compare --baseline OUT_A|latest|previous --candidate OUT_B --output CMP_DIR "
    "[--key FIELD] [--policy GATE.yaml] [--history DIR] [--group_by FIELD] [--allow_dataset_change] [Beam options]"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline.compare", usage=_USAGE, allow_abbrev=False)
    parser.add_argument(
        "--baseline",
        help="the baseline run's output directory, or 'latest' (the last accepted run) or 'previous' (the last "
        "run) from --history",
    )
    parser.add_argument("--candidate", help="the candidate run's output directory")
    parser.add_argument("--output", help="where to write comparison.json, flips.jsonl and report.html")
    parser.add_argument("--key", default=ROW_INDEX, help="pair rows by this item field (default: row_index)")
    parser.add_argument("--policy", default=None, help="gate policy file (YAML or JSON, any Beam file system)")
    parser.add_argument(
        "--history", default=None, help="run history directory: where latest/previous come from and the verdict goes"
    )
    parser.add_argument(
        "--group_by",
        action="append",
        default=None,
        help="gate each value of this item field too (repeatable; default: the runs' statistics.group_by)",
    )
    parser.add_argument(
        "--allow_dataset_change",
        action="store_true",
        help="compare runs over different datasets even when fewer than 90%% of either side's rows pair",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and Beam's logs")
    return parser


def compare(argv: list[str]) -> dict[str, Any]:
    """Run one comparison; return the ``comparison.json`` document (already written).

    Raises:
        EvaluatorError: a usage, config or input problem (exit 2).
        NoBaseline: ``--baseline latest`` resolved to nothing.
    """
    args, beam_args = _parser().parse_known_args(argv)
    check_flags(beam_args)
    if not (args.baseline and args.candidate and args.output):
        raise ConfigError(f"--baseline, --candidate and --output are all required: {_USAGE}.")
    policy = load_policy(args.policy)
    records = None if args.history is None else load_history(args.history)
    candidate = load_run(args.candidate, "candidate")
    try:
        baseline = load_run(resolve_baseline(args.baseline, records, args.history, candidate), "baseline")
    except NoBaseline:
        if args.history is not None:
            record_verdict(args.history, candidate, None, None)
        raise
    if args.baseline in BASELINE_CHOICES:
        check_recorded_run(baseline, records or [], args.history)
    plan = plan_pair(baseline, candidate, policy, args.policy, "both runs do not have", args.group_by)
    _make_dir(args.output)

    started = time.time()
    options = PipelineOptions(beam_args)
    runner = choose_runner(options)  # DirectRunner included: never a Prism download
    pipeline = beam.Pipeline(runner=runner, options=options)
    tally_path = FileSystems.join(args.output, _TALLY_FILE)
    flips_path = FileSystems.join(args.output, FLIPS_FILE)
    pair_rows(pipeline, None, (baseline, candidate, plan), args.key, tally_path, flips_path)
    result = pipeline.run()
    result.wait_until_finish()
    tally = take_tally(tally_path)
    refuse_bad_keys(tally, args.key, baseline, candidate)
    changed = check_datasets(tally, baseline, candidate, args.allow_dataset_change)
    if changed is not None:
        plan.warnings.append(changed)

    level = policy.confidence_level(config_level(candidate))
    gated = gate_comparison(gate_input(tally, plan, baseline, candidate), policy, level)
    flips = {"path": flips_path, "rows": flips_counted(result, None)}
    comparison = comparison_document(
        gated, (baseline, candidate, plan), tally, policy.described(args.policy, level), args.key, flips
    )
    comparison["run"] = {
        "runner": options.view_as(StandardOptions).runner or "FnApiRunner",
        "wall_time_s": round(time.time() - started, 3),
    }
    comparison["message"] = verdict_message(comparison, flips_path)
    write_json_atomically(FileSystems.join(args.output, COMPARISON_FILE), comparison)
    write_comparison_report(args.output)  # CMP_DIR/report.html: verdict, forest plot, flipped rows
    if args.history is not None:
        record_verdict(args.history, candidate, gated.verdict, run_id(baseline))
    return comparison


def _make_dir(directory: str) -> None:
    try:
        if "://" not in directory and not FileSystems.exists(directory):  # object stores have no directories
            FileSystems.mkdirs(directory)
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise OutputError(f"cannot use {directory!r} as the comparison's --output: {exc}.") from None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def format_table(comparison: dict[str, Any]) -> str:
    """The per-score lines printed on stdout (gated group scores below), and which p is shown."""
    header = f"{'score':<30} {'n':>7} {'baseline':>9} {'candidate':>9} {'delta':>9} {'CI':>21} {'margin':>7}"
    lines = [f"{header} {'p_reg_adj':>9}  verdict"]
    rows = [(s["name"], s) for s in comparison["scores"]]
    rows += [
        (f"  {g['by']}={json.dumps(g['value'])}: {s['name']}", s)
        for g in comparison.get("groups") or []
        for s in g["scores"]
        if s["gated"]
    ]
    for name, s in rows:
        interval = "-" if s["ci_low"] is None else f"[{s['ci_low']:+.4f}, {s['ci_high']:+.4f}]"
        lines.append(
            f"{name:<30} {s['n_paired']:>7} {_fmt(s['baseline_mean']):>9} {_fmt(s['candidate_mean']):>9} "
            f"{_fmt(s['delta']):>9} {interval:>21} {_fmt(s['margin']):>7} {_fmt(s['p_regression_adjusted']):>9}  "
            f"{s['verdict'] or 'reported'}"
        )
    family = comparison["holm_family"]
    policy = comparison["policy"]
    adjusted = "Holm-adjusted" if policy["correction"] == "holm" else "not adjusted (correction: none)"
    lines.append(
        f"p_reg_adj: the one-sided p-value of a drop beyond the margin, {adjusted} over {family} gated scores "
        f"(groups included); NO-GO below {policy['one_sided_level']:.3g}. GO: the {policy['confidence_level']:.0%} "
        "interval's lower end is at or above -margin."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code (0 GO, 1 NO-GO, 4 INCONCLUSIVE, 2 errors)."""
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        _parser().print_help()
        return 0
    debug = "--debug" in argv
    logging.basicConfig(level=logging.INFO if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not debug:
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    try:
        comparison = compare([arg for arg in argv if arg != "--debug"])
    except NoBaseline as exc:
        print(str(exc))
        return 0
    except Exception as exc:  # noqa: BLE001 - one paragraph, never a traceback
        if debug:
            traceback.print_exception(exc, file=sys.stderr)
        known = unwrap_pipeline_error(exc)
        if known is not None:
            print(f"error: {known}", file=sys.stderr)
            return EXIT_USAGE
        print(unexpected_error(exc, "comparison"), file=sys.stderr)
        return EXIT_INTERNAL
    print(format_table(comparison))
    message = comparison["message"]
    print(message, file=sys.stdout if comparison["verdict"] == "GO" else sys.stderr)
    for warning in comparison["warnings"]:  # a warning hidden in comparison.json is one nobody reads
        print(f"warning: {warning}", file=sys.stderr)
    return EXIT_CODES[comparison["verdict"]]


if __name__ == "__main__":
    sys.exit(main())
