"""What a ``--decide`` run leaves: rows/ with the order, results.json and comparison.json with the decision, history.

``results.json`` gains ``decision`` (every wave's bounds) and, when rows were left unsent,
``complete: false`` and ``stopped: "decided"``; ``OUT/comparison.json`` holds the verdict,
both runs and the policy beside the same ``decision``; the report (``beameval.report.decision``)
draws how the bounds narrowed. With ``--history`` the run is recorded with its status
(``stopped``: never a ``latest`` or ``previous`` baseline) and its verdict.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

from beameval.compare.policy import GatePolicy
from beameval.compare.verdict import GO, INCONCLUSIVE, NO_GO
from beameval.core.console import printable
from pipeline.compare_runs import Run, run_summary
from pipeline.decide_rows import add_order_columns
from pipeline.history import append_run, append_verdict
from pipeline.options import EvalOptions
from pipeline.quota import EXIT_BUDGET
from pipeline.report import report_after_run
from pipeline.results import RESULTS_FILE, write_json_atomically
from pipeline.summary import format_summary_table
from transforms.decide import DECIDED, DECIDED_MESSAGE

__all__ = ["COMPARISON_FILE", "EXIT_CODES", "decision_exit", "finish_decision"]

COMPARISON_FILE = "comparison.json"
#: The exit code of each verdict (CONTRACT "Comparing runs"): 0 GO, 1 NO-GO, 4 INCONCLUSIVE.
EXIT_CODES = {GO: 0, NO_GO: 1, INCONCLUSIVE: 4}


def finish_decision(
    flags: EvalOptions,
    results: dict[str, Any],
    decision: dict[str, Any],
    baseline: Run,
    order: dict[int, int],
    policy: GatePolicy,
    level: float,
    budget_hit: bool = False,
) -> dict[str, Any]:
    """Write the decided run's outputs (see the module docstring); return its results document.

    ``budget_hit``: rows of the waves were skipped by the budget (``stopped`` stays ``budget``);
    otherwise every skipped row is one the decision left unsent (``stopped: "decided"``).
    """
    output = flags.output.rstrip("/")
    add_order_columns(output, order, DECIDED_MESSAGE)
    if results.get("stopped") == "budget" and not budget_hit:  # finish_run saw skipped rows: they are ours
        results["stopped"] = DECIDED
    results["decision"] = decision
    write_json_atomically(f"{output}/{RESULTS_FILE}", results)
    comparison = {
        "verdict": decision["verdict"],
        "method": "anytime-valid confidence sequence (--decide)",
        "baseline": run_summary(baseline),
        "candidate": {
            "output": flags.output,
            "run_id": (results.get("provenance") or {}).get("run_id"),
            "stopped": results.get("stopped"),
        },
        "policy": policy.described(flags.policy, level),
        "decision": decision,
    }
    write_json_atomically(f"{output}/{COMPARISON_FILE}", comparison)
    report_after_run(output, results)
    if flags.history:
        append_run(flags.history, results, flags.output)
        stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        run_id = (results.get("provenance") or {}).get("run_id")
        append_verdict(flags.history, run_id, decision["verdict"], decision["baseline_run_id"], stamp)
    return results


def decision_exit(results: dict[str, Any]) -> int:
    """Print the scores and the decision's one-paragraph summary; return the verdict's exit code."""
    decision = results["decision"]
    verdict = decision["verdict"]
    if "candidates" in decision:  # targets: one line per candidate
        for name, block in decision["candidates"].items():
            print(
                printable(f"{name}: {block['verdict']} after {block['rows_evaluated']} of {block['rows_total']} rows")
            )
        print(
            printable(
                f"decided: {verdict} (each candidate against the first target, "
                f"{next(iter(decision['candidates'].values()))['baseline_target']})."
            ),
            file=sys.stderr,
        )
        return _budget_exit(results) or EXIT_CODES[verdict]
    print(printable(format_summary_table(results)))
    last = decision["waves"][-1]
    bounds = "; ".join(
        f"{s['name']}: delta in [{_fmt(s['cs_low'])}, {_fmt(s['cs_high'])}] (margin {_fmt(s['margin'])}, n {s['n']})"
        for s in last["scores"]
    )
    print(
        printable(
            f"decided: {verdict} after {decision['rows_evaluated']} of {decision['rows_total']} rows "
            f"({len(decision['waves'])} wave(s) of {decision['wave_rows']}, {decision['requests_sent']} requests "
            f"sent); anytime-valid bounds: {bounds}."
            + (
                f" The other {decision['rows_total'] - decision['rows_evaluated']} rows were not sent (skipped, "
                "skip_reason decided); --resume without --decide completes the run."
                if decision["rows_evaluated"] < decision["rows_total"]
                else ""
            )
        ),
        file=sys.stderr,
    )
    return _budget_exit(results) or EXIT_CODES[verdict]


def _budget_exit(results: dict[str, Any]) -> int | None:
    """EXIT_BUDGET, said on stderr, when the job's budget ran out before the verdict was certain; else None."""
    if results.get("stopped") != "budget":
        return None
    print("stopped: the run reached its budget (params.budget) before deciding; see above.", file=sys.stderr)
    return EXIT_BUDGET


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}"
