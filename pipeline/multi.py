"""``python -m pipeline.run`` with ``targets:``: one pipeline, N targets, a leaderboard and the comparisons.

The dataset is read once; each target gets its own branch of the graph (its own engine,
journal, store lookups and staging folder) and ends as a complete run directory
``OUT_DIR/targets/NAME/``, finished exactly as a single-target run is (``pipeline.run.finish_run``).
Then ``OUT_DIR/results.json`` (the leaderboard), ``OUT_DIR/comparison.json`` (each target
against the first, Holm across all) and ``OUT_DIR/report.html`` are written from those
directories.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

from beameval.cache.journal import JournalWriter
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.inference.budget import RunBudget
from beameval.inference.engine import InferenceEngine
from pipeline.cache import lookup_shards, run_store_use
from pipeline.finish import RunFailed, finish_run, pipeline_metrics, runner_info
from pipeline.first_answer import HandOff, first_answer, hand_off
from pipeline.graph import TargetBranch, build_targets_graph
from pipeline.job import endpoint_labels, first_paid, job_scope, job_spend, record_job, spent_before
from pipeline.job_record import check_resumed_config, record_job_config
from pipeline.leaderboard import build_leaderboard
from pipeline.local_runner import choose_runner
from pipeline.options import EvalOptions, progress_settings
from pipeline.output_dir import (
    lock_output,
    prepare_output,
    refuse_dataset_overlap,
    refuse_live_batches,
    staging_dir,
)
from pipeline.preflight import preflight
from pipeline.quota import job_config
from pipeline.report import COMPARISON_FILE, write_leaderboard_report
from pipeline.results import RESULTS_FILE, write_json_atomically
from pipeline.targets_compare import compare_targets
from transforms.progress import watch_progress
from transforms.read import list_dataset_files

__all__ = ["TARGETS_DIR", "run_targets", "target_dir"]

#: ``OUT_DIR/targets/NAME/``: each target's complete run directory.
TARGETS_DIR = "targets"


def target_dir(output: str, name: str) -> str:
    """Where target ``name`` of a multi-target run writes its run directory."""
    return FileSystems.join(output, TARGETS_DIR, name)


def run_targets(options: PipelineOptions, flags: EvalOptions, config: EvalConfig) -> dict[str, Any]:
    """Run a multi-target evaluation; return the top-level results document (with its comparison).

    Raises:
        EvaluatorError: anything a user can fix; RunFailed when a target's run failed
            (strict mode, or too many failed rows), after every other target was finished.
    """
    assert config.targets is not None
    limit = flags.limit if flags.limit is not None else config.params.limit_samples
    if limit is not None and limit < 1:
        raise EvaluatorError(f"--limit must be at least 1, got {limit}.")
    paths = list_dataset_files(config.dataset.path, config.dataset.format, config.dataset.split)
    refuse_dataset_overlap(flags.output, config.dataset.path, paths)  # else the run reads its own outputs back
    configs = {target.name: config.for_target(target) for target in config.targets}
    first_rows = {name: None if flags.skip_preflight else preflight(single, paths) for name, single in configs.items()}
    dry_run = bool(options.view_as(TestOptions).dry_run)
    store = run_store_use(config, flags)
    run_ids = {name: uuid.uuid4().hex for name in configs}  # each target's folder is a run of its own
    scope = job_scope(flags.output, flags.resume and not dry_run)  # one job: one budget, one limit per endpoint
    firsts = {}  # each target's answer to the first row's request (none on a dry run)
    spent = (0.0, 0.0)  # what earlier invocations of the job spent
    if not dry_run:
        lock_output(flags.output, uuid.uuid4().hex)  # one run at a time per OUT_DIR (its targets/ included)
        if flags.resume:  # before anything is sent: the journals answer the config they were started with
            check_resumed_config(flags.output, config)
        for name, single in configs.items():  # before anything is sent or deleted
            directory = target_dir(flags.output, name)
            refuse_live_batches(single, directory, flags.overwrite, flags.resume, flags.cancel_batches)
        for name, single in configs.items():
            directory = target_dir(flags.output, name)
            firsts[name] = first_answer(single, first_rows[name], directory, flags, store, job=scope.id)
        prepare_output(flags.output, flags.overwrite, resume=flags.resume)
        for name in configs:
            prepare_output(target_dir(flags.output, name), flags.overwrite, resume=flags.resume)
        if flags.resume:
            spent = spent_before(flags.output, scope)
    shards, handed = {}, {}
    for name, single in configs.items():
        directory = target_dir(flags.output, name)
        shards[name] = None if dry_run else lookup_shards(single, directory, store, flags.resume)  # before hand-off
        handed[name] = HandOff() if dry_run else hand_off(firsts.get(name), directory)  # into the target's journal
    paid, endpoints = first_paid([(configs[name], handed[name]) for name in configs])  # the preflights'
    if not dry_run:
        record_job(flags.output, scope, paid, endpoints)
        record_job_config(flags.output, config, flags.resume)
    left = (spent[0] + paid[0], spent[1] + paid[1])  # what the workers' budget lacks
    branches = []
    for name, single in configs.items():
        directory, run_id = target_dir(flags.output, name), run_ids[name]
        job = job_config(single, options, left, scope)  # worker count, the job's budget left, the job
        stage = staging_dir(directory, run_id)
        branches.append(TargetBranch(name, job, directory, run_id, shards[name], stage, handed[name].reply))

    started = time.time()
    pipeline = beam.Pipeline(runner=choose_runner(options), options=options)
    build_targets_graph(pipeline, config, branches, paths, limit)
    interval, _, local = progress_settings(options)
    try:
        with watch_progress(branches[0].run_id, interval if local else 0.0):
            result = pipeline.run()
            result.wait_until_finish()
    finally:
        InferenceEngine.close_all()
        JournalWriter.close_all()
        RunBudget.close_all()  # its spend logs, written and closed before the spend is read
    # The Beam counters are the whole job's (every target's requests together).
    run_info = {
        **runner_info(options),
        **pipeline_metrics(result),
        "wall_time_s": round(time.time() - started, 3),
        "dataset_files": len(paths),
    }
    if dry_run:
        return {"status": "dry_run", "run": run_info}
    per_target, failed = {}, []
    labels = Counter(label for single in configs.values() for label in set(endpoint_labels(single).values()))
    shared = frozenset(label for label, count in labels.items() if count > 1)  # a judge every target uses
    for branch in branches:
        try:
            per_target[branch.name] = finish_run(
                configs[branch.name],  # as configured: the job's copy only adds what the workers pace by
                branch.output,
                branch.stage,
                branch.run_id,
                store,
                paths,
                started,
                run_info,
                flags.history,
                spent,
                job_spend(configs[branch.name], scope, shared),
            )
        except RunFailed as exc:
            failed.append(f"target {branch.name!r}: {exc.message}")
    if failed:
        raise RunFailed(
            f"{len(failed)} of {len(branches)} targets failed, so the leaderboard and comparisons were not written: "
            + "; ".join(failed),
            hint="Each target's rows/ and errors/ are in OUT_DIR/targets/NAME/; fix the cause and rerun with --resume.",
        )
    results = build_leaderboard(per_target, config.public_dump(), run_info)
    results.update(_job_budget(config, per_target, spent, job_spend(config, scope).total))
    comparison = None
    if len(branches) > 1:
        directories = {branch.name: branch.output for branch in branches}
        comparison = compare_targets(flags.output, directories, flags.policy, options)
        write_json_atomically(FileSystems.join(flags.output, COMPARISON_FILE), comparison)
    results["run"]["wall_time_s"] = round(time.time() - started, 3)
    write_json_atomically(FileSystems.join(flags.output, RESULTS_FILE), results)
    write_leaderboard_report(flags.output, results, comparison, {b.name: b.output for b in branches})
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
        fields["usage"] = {
            "budget": {
                "max_tokens": budget.max_tokens,
                "max_usd": budget.max_usd,
                "spent_tokens": round(total[0]),
                "spent_usd": round(total[1], 6),
            }
        }
    return fields
