"""``python -m pipeline.compare``: pair two runs' rows in Beam, test every score, gate the release.

    python -m pipeline.compare --baseline OUT_A|latest|previous --candidate OUT_B --output CMP_DIR
                               [--key FIELD] [--policy GATE.yaml] [--history DIR] [--group_by FIELD]
                               [Beam options]

Writes ``CMP_DIR/comparison.json``, ``CMP_DIR/flips.jsonl`` (the pairs whose scores changed,
both outputs side by side) and ``CMP_DIR/report.html``. Exit codes: 0 GO, 1 NO-GO,
4 INCONCLUSIVE, 2 a usage, config or input error, 3 an internal error. The decision rule is
``beameval.compare.gate``; this module reads the runs, runs the Beam join that produces the
sums (overall, ``ok_rate`` and per group), and records the verdict in ``--history``.
``--baseline latest`` picks the most recent accepted run in ``--history`` with the
candidate's ``eval_hash`` (``previous``: the most recent, accepted or not); with none, there
is nothing to compare and the exit code is 0.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
import time
import traceback
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beameval.compare.gate import ComparisonInput, GroupInput, ScoreInput, gate_comparison
from beameval.compare.messages import verdict_message
from beameval.compare.pairing import BASELINE, CANDIDATE, SIDES, PairTally
from beameval.compare.policy import OK_RATE, GatePolicy, parse_policy
from beameval.compare.runs import BASELINE_CHOICES, baseline_run
from beameval.core.errors import ConfigError, EvaluatorError, OutputError
from beameval.stats.breakdown import group_order, parse_scope
from pipeline.cli import check_flags
from pipeline.history import append_verdict, load_history
from pipeline.local_runner import choose_runner
from pipeline.report import write_comparison_report
from pipeline.results import RESULTS_FILE, read_json, write_json_atomically
from pipeline.summary import unexpected_error, unwrap_pipeline_error
from transforms import NAMESPACE
from transforms.pair import ROW_INDEX, PairRuns, RunRows, bucket_count

__all__ = ["EXIT_CODES", "compare", "main"]

COMPARISON_FILE = "comparison.json"
FLIPS_FILE = "flips.jsonl"
_TALLY_FILE = "_tally.json"
EXIT_CODES = {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 4}
EXIT_USAGE = 2
EXIT_INTERNAL = 3
_USAGE = (
    "python -m pipeline.compare --baseline OUT_A|latest|previous --candidate OUT_B --output CMP_DIR "
    "[--key FIELD] [--policy GATE.yaml] [--history DIR] [--group_by FIELD] [Beam options]"
)
#: What a run that stopped at its budget says in results.json (CONTRACT "Budgets").
_BUDGET = "budget"


class NoBaseline(Exception):
    """``--baseline latest`` found no earlier run to compare with: not an error (exit 0)."""


class _Run:
    """One side: its directory, its results.json, and why it stopped early (None when it completed)."""

    def __init__(self, directory: str, results: dict[str, Any], stopped: str | None) -> None:
        self.directory = directory
        self.results = results
        self.stopped = stopped


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
    policy = _load_policy(args.policy)
    records = None if args.history is None else load_history(args.history)
    candidate = _load_run(args.candidate, "candidate")
    try:
        baseline = _load_run(_resolve_baseline(args.baseline, records, args.history, candidate), "baseline")
    except NoBaseline:
        if args.history is not None:
            _record_verdict(args.history, candidate, None, None)
        raise
    if args.baseline in BASELINE_CHOICES:
        _check_recorded_run(baseline, records or [], args.history)
    names, warnings, sides = _plan(baseline, candidate)
    unknown = policy.unknown_scores(names)
    if unknown:
        raise ConfigError(
            f"policy file {args.policy!r} gates {', '.join(map(repr, unknown))}, which both runs do not have; "
            f"the compared scores are: {', '.join(names) or 'none'}. Fix the score names in the policy."
        )
    group_by = args.group_by or _config_group_by(candidate) or _config_group_by(baseline)
    _make_dir(args.output)

    started = time.time()
    options = PipelineOptions(beam_args)
    runner = choose_runner(options)  # DirectRunner included: never a Prism download
    pipeline = beam.Pipeline(runner=runner, options=options)
    rows = max(_records(baseline.results), _records(candidate.results))
    pairs = pipeline | "PairRuns" >> PairRuns(
        sides[BASELINE], sides[CANDIDATE], args.key, names, bucket_count(rows), group_by
    )
    tally_path = FileSystems.join(args.output, _TALLY_FILE)
    flips_path = FileSystems.join(args.output, FLIPS_FILE)
    _ = pairs["tally"] | "WriteTally" >> beam.Map(_write_json, tally_path)
    _ = pairs["flips"] | "WriteFlips" >> beam.io.WriteToText(flips_path, shard_name_template="", num_shards=1)
    result = pipeline.run()
    result.wait_until_finish()
    tally = PairTally.from_dict(read_json(tally_path))
    FileSystems.delete([tally_path])
    _refuse_bad_keys(tally, args.key, {BASELINE: baseline.directory, CANDIDATE: candidate.directory})

    level = policy.confidence_level(_config_level(candidate))
    gated = gate_comparison(_gate_input(tally, names, group_by, baseline, candidate), policy, level)
    comparison = {
        "verdict": gated.verdict,
        "scores": gated.scores,
        **({"groups": gated.groups} if group_by else {}),
        "policy": policy.described(args.policy, level),
        "key": args.key,
        "group_by": group_by,
        "counts": _counts(tally),
        "baseline": _run_summary(baseline),
        "candidate": _run_summary(candidate),
        "flips": {"path": flips_path, "rows": _counter(result, "compare_flips")},
        "warnings": warnings,
        "notes": gated.notes,
        "run": {"runner": options.view_as(StandardOptions).runner or "FnApiRunner", "wall_time_s": 0.0},
    }
    comparison["run"]["wall_time_s"] = round(time.time() - started, 3)
    comparison["message"] = verdict_message(comparison, flips_path)
    write_json_atomically(FileSystems.join(args.output, COMPARISON_FILE), comparison)
    write_comparison_report(args.output)  # CMP_DIR/report.html: verdict, forest plot, flipped rows
    if args.history is not None:
        _record_verdict(args.history, candidate, gated.verdict, _run_id(baseline))
    return comparison


def _gate_input(
    tally: PairTally, names: list[str], group_by: list[str], baseline: _Run, candidate: _Run
) -> ComparisonInput:
    """The gate's input: each score's sums and known range, ok_rate, and each group's sums."""
    ranges = {**_ranges(candidate.results), **_ranges(baseline.results)}
    unpaired = (tally.unpaired[BASELINE], tally.unpaired[CANDIDATE])
    scores = [
        ScoreInput(name, sums, ranges.get(name), *unpaired, nan)
        for name, sums, nan in zip(names, tally.scores, tally.nan_excluded, strict=True)
    ]
    scores.append(ScoreInput(OK_RATE, tally.ok_rate, (0.0, 1.0), *unpaired))
    groups = []
    for scope in sorted(tally.groups, key=lambda scope: group_order(*parse_scope(scope))):
        position, value = parse_scope(scope)
        sums = tally.groups[scope]
        members = [ScoreInput(name, part, ranges.get(name)) for name, part in zip(names, sums, strict=False)]
        members.append(ScoreInput(OK_RATE, sums[-1], (0.0, 1.0)))
        groups.append(GroupInput(group_by[position], value, tally.group_paired.get(scope, 0), members))
    stopped = [f"the {SIDES[side]} run stopped at its {run.stopped}" for side, run in enumerate((baseline, candidate))]
    early = [text for text, run in zip(stopped, (baseline, candidate), strict=True) if run.stopped is not None]
    return ComparisonInput(scores, groups, "; ".join(early) or None)


def _ranges(results: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Each score's known range, as the run recorded it in its aggregate scores."""
    found = {}
    for score in (results.get("aggregate_scores") or {}).get("scores", []):
        bounds = score.get("range")
        if isinstance(bounds, list) and len(bounds) == 2:
            found[score["name"]] = (float(bounds[0]), float(bounds[1]))
    return found


def _config_group_by(run: _Run) -> list[str]:
    return list(((run.results.get("config") or {}).get("statistics") or {}).get("group_by") or [])


def _config_level(run: _Run) -> float | None:
    level = ((run.results.get("config") or {}).get("statistics") or {}).get("confidence_level")
    return None if level is None else float(level)


def _run_id(run: _Run) -> str | None:
    return (run.results.get("provenance") or {}).get("run_id")


def _record_verdict(history: str, candidate: _Run, verdict: str | None, baseline_run_id: str | None) -> None:
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    append_verdict(history, _run_id(candidate), verdict, baseline_run_id, stamp)


def _load_policy(path: str | None) -> GatePolicy:
    if path is None:
        return GatePolicy()
    try:
        with FileSystems.open(path) as handle:
            text = handle.read().decode("utf-8")
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise ConfigError(f"cannot read policy file {path!r}: {exc}.") from None
    return parse_policy(text, f"policy file {path!r}")


def _load_run(directory: str, side: str) -> _Run:
    """A side's results.json; refused (naming the side) unless the run completed or stopped at its budget."""
    path = FileSystems.join(directory, RESULTS_FILE)
    try:
        exists = FileSystems.exists(path)
    except Exception as exc:  # noqa: BLE001 - an unknown scheme or an unreachable store
        raise EvaluatorError(f"cannot read the {side} run {directory!r}: {exc}.") from None
    if not exists:
        raise EvaluatorError(
            f"the {side} run {directory!r} has no {RESULTS_FILE}: it is not the output directory of a completed "
            "run (a run writes results.json last, only when it completes). Point --"
            f"{side} at a completed run's --output."
        )
    try:
        results = dict(read_json(path))
    except ValueError as exc:
        raise EvaluatorError(f"the {side} run's {path!r} is not valid JSON ({exc}); rerun that evaluation.") from None
    stopped = results.get("stopped") if results.get("complete") is False else None
    if stopped == _BUDGET:
        return _Run(directory, results, _BUDGET)
    status = results.get("status")
    if status != "completed" or results.get("complete") is False:
        why = f"its status is {status!r}" if status != "completed" else f"it stopped early ({stopped!r})"
        raise EvaluatorError(
            f"the {side} run {directory!r} did not complete: {why} in {path} (for example more rows failed than "
            "params.max_error_rate allows). Its scores are not an evaluation; fix the cause and rerun it, or pass "
            f"another --{side}."
        )
    return _Run(directory, results, None)


def _resolve_baseline(baseline: str, records: list[dict[str, Any]] | None, history: str | None, candidate: _Run) -> str:
    if baseline not in BASELINE_CHOICES:
        return baseline
    if records is None:
        raise ConfigError(f"--baseline {baseline} needs --history DIR: the run history to pick the baseline from.")
    provenance = candidate.results.get("provenance") or {}
    eval_hash = provenance.get("eval_hash")
    if not eval_hash:
        raise EvaluatorError(
            f"the candidate run {candidate.directory!r} has no provenance.eval_hash in its results.json (it "
            "predates provenance); rerun it, or name the baseline directory with --baseline OUT_A."
        )
    chosen = baseline_run(records, baseline, eval_hash, provenance.get("run_id"), _absolute(candidate.directory))
    if chosen is None:
        accepted = " accepted" if baseline == "latest" else ""
        raise NoBaseline(
            f"no baseline: the history {history!r} holds no other{accepted} completed run with the candidate's "
            f"eval_hash {eval_hash[:12]} ({len(records)} records), so there is nothing to compare with yet. The "
            "candidate becomes the baseline of the next comparison once it is recorded with --history."
        )
    return str(chosen["output"])


def _absolute(directory: str) -> str:
    return directory if "://" in directory else os.path.abspath(directory)


def _check_recorded_run(baseline: _Run, records: list[dict[str, Any]], history: str | None) -> None:
    """The run found at a history record's output must be the run recorded there (not a later one written over it)."""
    recorded = [r.get("run_id") for r in records if r.get("output") == baseline.directory]
    found = _run_id(baseline)
    if recorded and found not in recorded:
        raise EvaluatorError(
            f"the history {history!r} records run {recorded[-1]} at {baseline.directory!r}, but the run there now "
            f"is {found}: the directory was written over. Compare with an explicit --baseline, or record runs "
            "in distinct output directories (e.g. --output runs/{run_date})."
        )


def _plan(baseline_run: _Run, candidate_run: _Run) -> tuple[list[str], list[str], dict[int, RunRows]]:
    """The scores both runs have as row columns, warnings, and each side's rows to read."""
    baseline, candidate = baseline_run.results, candidate_run.results
    columns: dict[int, set[str]] = {}
    sides: dict[int, RunRows] = {}
    for side, run in ((BASELINE, baseline_run), (CANDIDATE, candidate_run)):
        directory, results = run.directory, run.results
        pattern = FileSystems.join(directory, "rows", "*.parquet")
        files = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
        if not files:
            raise EvaluatorError(f"the {SIDES[side]} run {directory!r} has no rows/*.parquet files to compare.")
        with FileSystems.open(files[0]) as handle:
            schema = pq.ParquetFile(handle).schema_arrow
        floats = {f.name for f in schema if pa.types.is_floating(f.type)}
        names = [s["name"] for s in (results.get("aggregate_scores") or {}).get("scores", [])]
        columns[side] = {name for name in names if name in floats}
        sides[side] = RunRows(pattern, "sample_index" in schema.names)
    base_names = [s["name"] for s in baseline["aggregate_scores"]["scores"] if s["name"] in columns[BASELINE]]
    names = [name for name in base_names if name in columns[CANDIDATE]]
    warnings = []
    only = {side: sorted(columns[side] - set(names)) for side in (BASELINE, CANDIDATE)}
    for side, missing in only.items():
        if missing:
            warnings.append(f"only the {SIDES[side]} has {', '.join(missing)}; not compared.")
    base_hash, cand_hash = ((r.get("provenance") or {}).get("eval_hash") for r in (baseline, candidate))
    if base_hash and cand_hash and base_hash != cand_hash:
        warnings.append(
            f"the runs' eval_hash differ ({base_hash[:12]} vs {cand_hash[:12]}): the dataset, prompt, metrics or "
            "inference parameters changed as well as the target, and the deltas include that change."
        )
    return names, warnings, sides


def _records(results: dict[str, Any]) -> int:
    """How many records the run's rows/ holds (samples with repeats), for sizing the join."""
    counts = results.get("counts") or {}
    return int(counts.get("samples") or counts.get("rows") or 0)


def _make_dir(directory: str) -> None:
    try:
        if "://" not in directory and not FileSystems.exists(directory):  # object stores have no directories
            FileSystems.mkdirs(directory)
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise OutputError(f"cannot use {directory!r} as the comparison's --output: {exc}.") from None


def _refuse_bad_keys(tally: PairTally, key: str, dirs: dict[int, str]) -> None:
    for side in (BASELINE, CANDIDATE):
        example = tally.duplicate_example[side]
        if example is not None:
            raise EvaluatorError(
                f"--key {key!r} is not unique in the {SIDES[side]} run {dirs[side]!r}: {example[0]} is on rows "
                f"{example[1]} and {example[2]} ({tally.duplicates[side]} duplicated keys in all). Pass a --key that "
                "identifies each row (e.g. an id field), or the default row_index."
            )
        missing = tally.missing_example[side]
        if missing is not None:
            raise EvaluatorError(
                f"--key {key!r}: {tally.missing_key[side]} rows of the {SIDES[side]} run {dirs[side]!r} have no field "
                f"{key!r} (the first is row {missing}). Pass a field every row has, or the default row_index."
            )


def _counts(tally: PairTally) -> dict[str, int]:
    return {
        "baseline_rows": tally.keys[BASELINE] + tally.unkeyed[BASELINE],
        "candidate_rows": tally.keys[CANDIDATE] + tally.unkeyed[CANDIDATE],
        "paired": tally.paired,
        "unpaired_baseline": tally.unpaired[BASELINE],
        "unpaired_candidate": tally.unpaired[CANDIDATE],
        "failed_baseline": tally.failed[BASELINE] + tally.unkeyed[BASELINE],
        "failed_candidate": tally.failed[CANDIDATE] + tally.unkeyed[CANDIDATE],
    }


def _run_summary(run: _Run) -> dict[str, Any]:
    results, directory = run.results, run.directory
    provenance = results.get("provenance") or {}
    target = (results.get("config") or {}).get("target") or {}
    return {
        "output": directory,
        "run_id": provenance.get("run_id"),
        "finished_at": provenance.get("finished_at"),
        "eval_hash": provenance.get("eval_hash"),
        "target_model": (target.get("model") or {}).get("name"),
        "models_seen": provenance.get("models_seen"),
        "stopped": run.stopped,
    }


def _write_json(data: dict[str, Any], path: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(json.dumps(data).encode("utf-8"))


def _counter(result: beam.runners.runner.PipelineResult, name: str) -> int | None:
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name(name))["counters"]
    except (NotImplementedError, AttributeError, KeyError):
        return None
    return sum(int(c.committed if c.committed is not None else c.attempted) for c in found)


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
    family = sum(1 for _, s in rows if s["p_regression_adjusted"] is not None)
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
    return EXIT_CODES[comparison["verdict"]]


if __name__ == "__main__":
    sys.exit(main())
