"""The leaderboard of a job with ``targets:``: each target's run directory, then the job's results side by side.

The job itself (one pipeline, one branch per target) is run by ``pipeline.orchestrate``:
the dataset is read once; each target gets its own branch of the graph (its own engine,
journal, store lookups and staging folder) and ends as a complete run directory
``OUT_DIR/targets/NAME/``, finished exactly as a single-target run is (``pipeline.finish.finish_run``).
Then ``OUT_DIR/results.json`` (the leaderboard), ``OUT_DIR/comparison.json`` (each target
against the first, Holm across all) and ``OUT_DIR/report.html`` are written from those
directories (:func:`publish_leaderboard`).
"""

from __future__ import annotations

import time
from typing import Any

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from beameval.config.schema import EvalConfig
from pipeline.leaderboard import build_leaderboard
from pipeline.options import EvalOptions
from pipeline.quota import budget_block
from pipeline.report import COMPARISON_FILE, write_leaderboard_report
from pipeline.results import RESULTS_FILE, write_json_atomically
from pipeline.targets_compare import compare_targets

__all__ = ["TARGETS_DIR", "publish_leaderboard", "target_dir"]

#: ``OUT_DIR/targets/NAME/``: each target's complete run directory.
TARGETS_DIR = "targets"


def target_dir(output: str, name: str) -> str:
    """Where target ``name`` of a multi-target run writes its run directory."""
    return FileSystems.join(output, TARGETS_DIR, name)


def publish_leaderboard(
    options: PipelineOptions,
    flags: EvalOptions,
    config: EvalConfig,
    per_target: dict[str, dict[str, Any]],
    directories: dict[str, str],
    run_info: dict[str, Any],
    spent: tuple[float, float],
    total: tuple[float, float] | None,
    started: float,
) -> dict[str, Any]:
    """Write the job's leaderboard, comparisons and report from its finished targets; return it with its comparison.

    ``per_target``: each target's results document; ``directories``: its run directory;
    ``spent``: what earlier invocations of the job spent; ``total``: the job's spend from its
    ledger (None: none).
    """
    results = build_leaderboard(per_target, config.public_dump(), run_info)
    results.update(_job_budget(config, per_target, spent, total))
    comparison = None
    if len(directories) > 1:
        comparison = compare_targets(flags.output, directories, flags.policy, options)
        write_json_atomically(FileSystems.join(flags.output, COMPARISON_FILE), comparison)
    results["run"]["wall_time_s"] = round(time.time() - started, 3)
    write_json_atomically(FileSystems.join(flags.output, RESULTS_FILE), results)
    write_leaderboard_report(flags.output, results, comparison, directories)
    return {**results, "comparison": comparison}


def _job_budget(
    config: EvalConfig,
    per_target: dict[str, dict[str, Any]],
    spent: tuple[float, float],
    total: tuple[float, float] | None,
) -> dict[str, Any]:
    """The leaderboard's ``status``, ``complete``, ``stopped`` and ``usage.budget``: the job's, every target together.

    A target stopped at the budget (rows ``skipped``) stops the job (exit 5). The spend is the
    job's ledger (``total``) when it has one, else ``spent`` before and each target's own.
    """
    stopped = any(results.get("status") == "stopped" for results in per_target.values())
    fields: dict[str, Any] = {"complete": not stopped}
    if stopped:
        fields.update(status="stopped", stopped="budget")
    budget = config.params.budget
    if budget is not None:
        if total is None:
            used = [results["usage"].get("budget") or {} for results in per_target.values()]
            total = (
                spent[0] + sum(block.get("spent_tokens", 0) - spent[0] for block in used),
                spent[1] + sum(block.get("spent_usd", 0.0) - spent[1] for block in used),
            )
        fields["usage"] = {"budget": budget_block(budget, total)}
    return fields
