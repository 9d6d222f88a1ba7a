"""Parity check: the same evaluations through our pipeline and through the reference SDK.

Runs each case twice, once with ``python -m pipeline.run`` (our side) and once with the
NeMo evaluator SDK (the reference) in its own virtual environment, via
``bench/reference_runner.py``. Then it compares every aggregate field of every score
(``count, nan_count, sum, mean, min, max, std_dev, variance, score_type, percentiles,
histogram bins, rubric_distribution, mode_category``), matched by score name, and prints
a table ``score | field | ours | reference | match`` with a summary line.

Cases (deterministic generated data, about 200 rows each, written to a temp dir):

* ``offline``: outputs already in the rows (``candidate`` templates, no target); exact-match,
  f1, bleu (sentence + corpus), rouge, six string-checks, five number-checks, tool-calling
  (the predicted calls come from each row's ``response``).
* ``online``: both sides call one local test server (``testserver``) whose replies are
  scripted per row: exact-match + f1 with a chat prompt template, and an llm-judge with a
  rubric score and a range score answered in plain JSON.

Tolerance: two numbers match when ``abs(a - b) <= 1e-9 * max(abs(a), abs(b))`` (relative
1e-9) or ``abs(a - b) <= 1e-12`` (an absolute floor, so that floating noise around 0 such
as 0.0 vs 5e-17 is not a mismatch). NaN matches NaN, null matches null, strings and
integer counts must be equal. The table says ``exact`` for bit-identical values and
``~1e-9`` for values equal within the tolerance (e.g. the percentile 0.2 vs the
reference's 0.19999999999999996). Differences that bench/PARITY.md documents as
deliberate are either kept out of the generated data or, when narrowly recognised by
:func:`bench.parity_compare.known_difference`, shown as ``known`` and not counted as mismatches. For every
mismatching score the first rows whose values differ are printed with their items.

Exit status: 0 when every field matches (or the reference is unavailable and
``--require-reference`` is not given), 1 on any mismatch or a score missing on our side,
2 when a run failed or the reference is required but unavailable.

``--throughput`` also measures rows/s of the reference and of our pipeline for offline
exact-match over 100,000 rows and online exact-match against the test server (20 ms
latency, parallelism 64, 2,000 rows), and prints the ratios ours / reference.

Usage::

    .venv/bin/python bench/parity.py                    # parity, 200 rows per case
    .venv/bin/python bench/parity.py --smoke            # 30 rows, for CI
    .venv/bin/python bench/parity.py --throughput       # parity + throughput
    .venv/bin/python bench/parity.py --throughput --no-parity

JSON results go to ``bench/results/parity-<time>.json`` (or ``--json``).

This file is the entry point: the CLI, running each parity case on both sides, and the
JSON report. The parts it uses live beside it, one job each: ``parity_data.py`` (the
generated rows), ``parity_cases.py`` (the metric lists and how each side is configured),
``parity_sides.py`` (running ours and the reference in subprocesses),
``parity_compare.py`` (field-by-field comparison and tolerance), ``parity_report.py``
(tables and summary line) and ``parity_throughput.py`` (``--throughput``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

# The parts live in bench/parity_*.py, one job each (needs the project root on sys.path).
from bench.parity_cases import (  # noqa: E402
    Case,
    build_offline_case,
    build_online_case,
    expected_score_names,
    offline_metrics,
    online_metrics,
)
from bench.parity_compare import ABS_TOL, MISSING, REL_TOL, compare_scores, compare_values, row_differences  # noqa: E402
from bench.parity_data import offline_rows, online_rows, write_jsonl  # noqa: E402
from bench.parity_report import report_cases  # noqa: E402
from bench.parity_sides import RunError, run_ours, run_reference  # noqa: E402
from bench.parity_throughput import print_throughput, run_throughput  # noqa: E402
from bench.sides import DEFAULT_REFERENCE_PYTHON, INSTALL_HINT, probe_reference, reference_python  # noqa: E402

# What tests/bench/test_parity_smoke.py reaches through this module (loaded from its file path).
__all__ = [
    "MISSING",
    "compare_scores",
    "compare_values",
    "expected_score_names",
    "main",
    "offline_metrics",
    "offline_rows",
    "online_metrics",
    "online_rows",
]


def run_case(case: Case, work: Path, ref_python: str | None) -> dict[str, Any]:
    """One case through our side and, when available, the reference; its JSON report.

    With the reference, ``comparison`` holds the :class:`~bench.parity_compare.Comparison`
    (replaced by plain fields in :func:`~bench.parity_report.report_cases`) and
    ``row_differences`` the first differing rows of each mismatching score.
    """
    dataset = write_jsonl(work / f"{case.name}.jsonl", case.rows)
    expected = expected_score_names(case.metrics)
    ours = run_ours(case.our_config(dataset), work, case.name, rows=True)
    our_scores = ours["aggregate_scores"]["scores"]
    missing = [n for n in expected if n not in {s["name"] for s in our_scores}]
    report: dict[str, Any] = {
        "case": case.name,
        "rows": len(case.rows),
        "expected_scores": expected,
        "ours": {"counts": ours["counts"], "scores": our_scores, "command_wall_s": ours["_command_wall_s"]},
        "ours_missing_scores": missing,
    }
    print(
        f"case {case.name}: ours {ours['counts']} in {ours['_command_wall_s']:.1f} s, "
        f"{len(our_scores)} scores" + (f", MISSING {missing}" if missing else ""),
        file=sys.stderr,
    )
    if ref_python is None:
        return report
    ref = run_reference(ref_python, {**case.reference_spec(dataset), "dump_rows": True}, work, case.name)
    report["reference"] = {
        "row_status": ref["row_status"],
        "first_errors": ref["first_errors"],
        "scores": ref["aggregate_scores"],
        "run_sync_s": ref["elapsed_s"],
    }
    print(
        f"case {case.name}: reference {ref['row_status']} in {ref['_command_wall_s']:.1f} s "
        f"({len(ref['aggregate_scores'])} scores)",
        file=sys.stderr,
    )
    comparison = compare_scores(case.name, our_scores, ref["aggregate_scores"])
    report["comparison"] = comparison
    report["row_differences"] = {
        score: row_differences(ours["_row_values"].get(score, {}), ref["row_values"].get(score, {}), case.rows)
        for score in sorted({r[0] for r in comparison.mismatches})
        if score in ours["_row_values"] or score in ref["row_values"]
    }
    return report


def run_parity(args: argparse.Namespace, work: Path, ref_python: str | None) -> list[dict[str, Any]]:
    """The offline case, then the online case against a test server scripted with its replies."""
    from beameval.testserver.harness import ServerProcess

    n = args.rows
    reports = [run_case(build_offline_case(n), work, ref_python)]
    with ServerProcess() as server:
        case, rules = build_online_case(n, server.base_url)
        server.configure(rules=rules)
        reports.append(run_case(case, work, ref_python))
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--reference-python", default=None, help=f"default: $REFERENCE_PYTHON or {DEFAULT_REFERENCE_PYTHON}"
    )
    parser.add_argument("--require-reference", action="store_true", help="exit 2 when the reference SDK is unavailable")
    parser.add_argument("--rows", type=int, default=200, help="rows per parity case")
    parser.add_argument("--smoke", action="store_true", help="30 rows per case, for CI")
    parser.add_argument("--mismatches-only", action="store_true", help="print only the mismatching fields")
    parser.add_argument("--throughput", action="store_true", help="also measure rows/s of both sides")
    parser.add_argument("--no-parity", action="store_true", help="skip the parity cases (with --throughput)")
    parser.add_argument("--offline-rows", type=int, default=100_000)
    parser.add_argument("--online-rows", type=int, default=2_000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--parallelism", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1, help="throughput runs per side; the fastest is reported")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON results")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows = 30

    python = reference_python(args.reference_python)
    version = probe_reference(python)
    ref_python: str | None = python if version else None
    if version is None:
        print(f"reference SDK not available: {INSTALL_HINT}")
        if args.require_reference:
            return 2
        print("computing only our side")
    else:
        print(f"reference: {version} ({python})", file=sys.stderr)

    report: dict[str, Any] = {
        "benchmark": "parity",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "reference": version,
        "tolerance": {"relative": REL_TOL, "absolute_floor": ABS_TOL},
        "cases": [],
    }
    work = Path(tempfile.mkdtemp(prefix="parity-"))
    exit_code = 0
    try:
        if not args.no_parity:
            report["cases"] = run_parity(args, work, ref_python)
            exit_code = report_cases(report["cases"], args.mismatches_only, ref_python is not None)
        if args.throughput:
            report["throughput"] = run_throughput(args, work, ref_python)
            print_throughput(report["throughput"])
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        exit_code = 2
    finally:
        if args.keep:
            print(f"work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    target = args.json or PROJECT_ROOT / "bench" / "results" / f"parity-{time.strftime('%Y%m%d-%H%M%S')}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    report["exit_code"] = exit_code
    target.write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    print(f"JSON: {target}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
