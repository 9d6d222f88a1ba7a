"""``python -m pipeline.compare``: pair two runs' rows in Beam, test every score, gate the release.

    python -m pipeline.compare --baseline OUT_A --candidate OUT_B --output CMP_DIR
                               [--key FIELD] [--policy GATE.yaml] [--history DIR] [Beam options]

Writes ``CMP_DIR/comparison.json``, ``CMP_DIR/flips.jsonl`` (the pairs whose scores changed,
both outputs side by side) and ``CMP_DIR/report.html``. Exit codes: 0 GO, 1 NO-GO,
4 INCONCLUSIVE, 2 a usage, config or input error, 3 an internal error. ``--baseline latest``
picks the most recent completed run in ``--history`` with the candidate's ``eval_hash``;
with none, there is nothing to compare and the exit code is 0.
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
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beameval.compare.messages import verdict_message
from beameval.compare.pairing import BASELINE, CANDIDATE, SIDES, PairTally
from beameval.compare.policy import GatePolicy, parse_policy
from beameval.compare.runs import latest_run
from beameval.compare.scores import compare_scores
from beameval.core.errors import ConfigError, EvaluatorError, OutputError
from pipeline.cli import check_flags
from pipeline.history import history_exists, read_runs
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
    "python -m pipeline.compare --baseline OUT_A|latest --candidate OUT_B --output CMP_DIR "
    "[--key FIELD] [--policy GATE.yaml] [--history DIR] [Beam options]"
)


class NoBaseline(Exception):
    """``--baseline latest`` found no earlier run to compare with: not an error (exit 0)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline.compare", usage=_USAGE, allow_abbrev=False)
    parser.add_argument("--baseline", help="the baseline run's output directory, or 'latest' (needs --history)")
    parser.add_argument("--candidate", help="the candidate run's output directory")
    parser.add_argument("--output", help="where to write comparison.json, flips.jsonl and report.html")
    parser.add_argument("--key", default=ROW_INDEX, help="pair rows by this item field (default: row_index)")
    parser.add_argument("--policy", default=None, help="gate policy file (YAML or JSON, any Beam file system)")
    parser.add_argument("--history", default=None, help="run history directory, for --baseline latest")
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
    candidate = _load_run(args.candidate, "candidate")
    baseline_dir = _resolve_baseline(args.baseline, args.history, args.candidate, candidate)
    baseline = _load_run(baseline_dir, "baseline")
    names, warnings, sides = _plan(baseline, candidate, baseline_dir, args.candidate)
    unknown = policy.unknown_scores(names)
    if unknown:
        raise ConfigError(
            f"policy file {args.policy!r} gates {', '.join(map(repr, unknown))}, which both runs do not have; "
            f"the compared scores are: {', '.join(names) or 'none'}. Fix the score names in the policy."
        )
    _make_dir(args.output)

    started = time.time()
    options = PipelineOptions(beam_args)
    runner = choose_runner(options)  # DirectRunner included: never a Prism download
    pipeline = beam.Pipeline(runner=runner, options=options)
    rows = max(_records(baseline), _records(candidate))
    pairs = pipeline | "PairRuns" >> PairRuns(sides[BASELINE], sides[CANDIDATE], args.key, names, bucket_count(rows))
    tally_path = FileSystems.join(args.output, _TALLY_FILE)
    flips_path = FileSystems.join(args.output, FLIPS_FILE)
    _ = pairs["tally"] | "WriteTally" >> beam.Map(_write_json, tally_path)
    _ = pairs["flips"] | "WriteFlips" >> beam.io.WriteToText(flips_path, shard_name_template="", num_shards=1)
    result = pipeline.run()
    result.wait_until_finish()
    tally = PairTally.from_dict(read_json(tally_path))
    FileSystems.delete([tally_path])
    _refuse_bad_keys(tally, args.key, {BASELINE: baseline_dir, CANDIDATE: args.candidate})

    records, verdict = compare_scores(
        dict(zip(names, tally.scores, strict=True)),
        policy,
        tally.unpaired[BASELINE],
        tally.unpaired[CANDIDATE],
        dict(zip(names, tally.nan_excluded, strict=True)),
    )
    comparison = {
        "verdict": verdict,
        "scores": records,
        "policy": {
            "source": args.policy,
            "alpha": policy.alpha,
            "correction": policy.correction,
            "scores": {name: {"max_drop": drop} for name, drop in policy.gates(names).items()},
        },
        "key": args.key,
        "counts": _counts(tally),
        "baseline": _run_summary(baseline, baseline_dir),
        "candidate": _run_summary(candidate, args.candidate),
        "flips": {"path": flips_path, "rows": _counter(result, "compare_flips")},
        "warnings": warnings,
        "run": {"runner": options.view_as(StandardOptions).runner or "FnApiRunner", "wall_time_s": 0.0},
    }
    comparison["run"]["wall_time_s"] = round(time.time() - started, 3)
    comparison["message"] = verdict_message(comparison, flips_path)
    write_json_atomically(FileSystems.join(args.output, COMPARISON_FILE), comparison)
    write_comparison_report(args.output)  # CMP_DIR/report.html: verdict, forest plot, flipped rows
    return comparison


def _load_policy(path: str | None) -> GatePolicy:
    if path is None:
        return GatePolicy()
    try:
        with FileSystems.open(path) as handle:
            text = handle.read().decode("utf-8")
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise ConfigError(f"cannot read policy file {path!r}: {exc}.") from None
    return parse_policy(text, f"policy file {path!r}")


def _load_run(directory: str, side: str) -> dict[str, Any]:
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
        results = read_json(path)
    except ValueError as exc:
        raise EvaluatorError(f"the {side} run's {path!r} is not valid JSON ({exc}); rerun that evaluation.") from None
    return dict(results)


def _resolve_baseline(baseline: str, history: str | None, candidate_dir: str, candidate: dict[str, Any]) -> str:
    if baseline != "latest":
        return baseline
    if not history:
        raise ConfigError("--baseline latest needs --history DIR: the run history to pick the baseline from.")
    provenance = candidate.get("provenance") or {}
    eval_hash = provenance.get("eval_hash")
    if not eval_hash:
        raise EvaluatorError(
            f"the candidate run {candidate_dir!r} has no provenance.eval_hash in its results.json (it predates "
            "provenance); rerun it, or name the baseline directory with --baseline OUT_A."
        )
    records = read_runs(history)[0] if history_exists(history) else []
    chosen = latest_run(records, eval_hash, provenance.get("run_id"), candidate_dir)
    if chosen is None:
        raise NoBaseline(
            f"no baseline: the history {history!r} holds no other completed run with the candidate's eval_hash "
            f"{eval_hash[:12]} ({len(records)} runs recorded), so there is nothing to compare with yet. The candidate "
            "becomes the baseline of the next comparison once it is recorded with --history."
        )
    return str(chosen["output"])


def _plan(
    baseline: dict[str, Any], candidate: dict[str, Any], baseline_dir: str, candidate_dir: str
) -> tuple[list[str], list[str], dict[int, RunRows]]:
    """The scores both runs have as row columns, warnings, and each side's rows to read."""
    columns: dict[int, set[str]] = {}
    sides: dict[int, RunRows] = {}
    for side, directory, results in ((BASELINE, baseline_dir, baseline), (CANDIDATE, candidate_dir, candidate)):
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


def _run_summary(results: dict[str, Any], directory: str) -> dict[str, Any]:
    provenance = results.get("provenance") or {}
    target = (results.get("config") or {}).get("target") or {}
    return {
        "output": directory,
        "run_id": provenance.get("run_id"),
        "finished_at": provenance.get("finished_at"),
        "eval_hash": provenance.get("eval_hash"),
        "target_model": (target.get("model") or {}).get("name"),
        "models_seen": provenance.get("models_seen"),
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
    """The per-score lines printed on stdout."""
    lines = [f"{'score':<30} {'n':>7} {'baseline':>9} {'candidate':>9} {'delta':>9} {'CI':>21} {'p':>9}  verdict"]
    for s in comparison["scores"]:
        interval = "-" if s["ci_low"] is None else f"[{s['ci_low']:+.4f}, {s['ci_high']:+.4f}]"
        p_value = s["p_value_adjusted"] if s["p_value_adjusted"] is not None else s["p_value"]
        lines.append(
            f"{s['name']:<30} {s['n_paired']:>7} {_fmt(s['baseline_mean']):>9} {_fmt(s['candidate_mean']):>9} "
            f"{_fmt(s['delta']):>9} {interval:>21} {_fmt(p_value):>9}  {s['verdict'] or 'reported'}"
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
