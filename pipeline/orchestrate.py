"""One orchestrator for every run: a job of one target (``target:``) or of several (``targets:``).

A single-target run is a job with one target, written in ``OUT_DIR`` itself; with
``targets:`` each target writes ``OUT_DIR/targets/NAME/`` and the job ends with the
leaderboard (``pipeline.multi``). Either way the driver does the same things in the same
order, once, so each money or durability rule lives in one place:

1. free checks: ``--limit``, the dataset files (never the run's own outputs), each target's
   preflight;
2. before anything is paid or deleted: OUT_DIR's lock, a resumed config that changed, live
   batches that ``--overwrite`` would orphan;
3. what earlier invocations of the job spent, and what their batches still running hold;
   each target's first request (the preflight's paid one), then the outputs prepared, the
   store and journal shards, the first answers handed to the journals, the job and its
   config recorded;
4. one Beam job (``execute``) with every target's workers drawing on the job's budget less
   what was spent and held;
5. each target's run published (``finish_run``) with the job's spend from its ledger.

A dry run (Beam's ``--dry_run``) builds the job and sends nothing: steps 2, 3 and 5 are skipped.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

from beameval.cache.journal import JournalWriter
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.inference.budget import RunBudget
from beameval.inference.engine import InferenceEngine
from pipeline.cache import lookup_shards, run_store_use
from pipeline.finish import RunFailed, finish_run, pipeline_metrics, runner_info
from pipeline.first_answer import HandOff, first_answer, hand_off
from pipeline.graph import TargetBranch, build_job_graph
from pipeline.job import (
    endpoint_labels,
    first_paid,
    hold_live_batches,
    job_scope,
    job_spend,
    record_job,
    spent_before,
)
from pipeline.job_record import check_resumed_config, record_job_config
from pipeline.local_runner import choose_runner
from pipeline.multi import publish_leaderboard, target_dir
from pipeline.options import EvalOptions, progress_settings
from pipeline.output_dir import lock_output, prepare_output, refuse_dataset_overlap, refuse_live_batches, staging_dir
from pipeline.preflight import preflight
from pipeline.quota import job_config
from transforms.progress import watch_progress
from transforms.read import list_dataset_files

__all__ = ["JobTarget", "claim_output", "execute", "job_limit", "job_paths", "job_targets", "run_job"]


@dataclass(frozen=True)
class JobTarget:
    """One target of the job: its single-target config (as configured), where it writes, and its run id."""

    name: str
    config: EvalConfig
    output: str
    run_id: str


def job_targets(config: EvalConfig, output: str, run_id: str) -> list[JobTarget]:
    """The job's targets: ``config`` itself in ``output`` (``run_id``), or each of ``targets:`` in its own folder."""
    if config.targets is None:
        return [JobTarget("", config, output, run_id)]
    return [
        JobTarget(target.name, config.for_target(target), target_dir(output, target.name), uuid.uuid4().hex)
        for target in config.targets  # each target's folder is a run of its own
    ]


def job_limit(flags: EvalOptions, config: EvalConfig) -> int | None:
    """``--limit``, else ``params.limit_samples``: evaluate rows with ``row_index`` below it (None: every row)."""
    limit = flags.limit if flags.limit is not None else config.params.limit_samples
    if limit is not None and limit < 1:
        raise EvaluatorError(f"--limit must be at least 1, got {limit}.")
    return limit


def job_paths(config: EvalConfig, output: str) -> list[str]:
    """The dataset's files, sorted; refused when they overlap ``output`` (else the run reads its own outputs back)."""
    paths = list_dataset_files(config.dataset.path, config.dataset.format, config.dataset.split)
    refuse_dataset_overlap(output, config.dataset.path, paths)
    return paths


def claim_output(flags: EvalOptions, config: EvalConfig, targets: list[JobTarget], run_id: str) -> None:
    """Before anything is paid or deleted: take OUT_DIR, and refuse what would lose paid answers.

    OUT_DIR's lock (one run at a time, its targets/ included, until ``pipeline.run.main``
    releases it); on ``--resume``, a config that is not the one the journals answer; with
    ``--overwrite``, batches the provider still runs (``--cancel_batches`` cancels them).
    """
    lock_output(flags.output, run_id)
    if flags.resume:
        check_resumed_config(flags.output, config)
    for t in targets:
        refuse_live_batches(t.config, t.output, flags.overwrite, flags.resume, flags.cancel_batches)


def run_job(options: PipelineOptions, flags: EvalOptions, config: EvalConfig, run_id: str) -> dict[str, Any]:
    """Run the job (see the module docstring); return its results document.

    A single target's is its ``results.json``; several targets' is the leaderboard with
    its ``comparison``.

    Raises:
        EvaluatorError: anything a user can fix; RunFailed when a run failed (strict mode, or
            too many failed rows): with several targets, after every other target was finished.
    """
    if flags.policy and config.targets is None:
        raise EvaluatorError(
            "--policy applies to a run with targets: (its OUT_DIR/comparison.json); a single-target run is "
            "gated by python -m pipeline.compare --policy GATE.yaml."
        )
    limit = job_limit(flags, config)
    paths = job_paths(config, flags.output)
    targets = job_targets(config, flags.output, run_id)
    first_rows = [None if flags.skip_preflight else preflight(t.config, paths) for t in targets]  # free checks only
    dry_run = bool(options.view_as(TestOptions).dry_run)  # Beam's --dry_run: build the job, run nothing
    store = run_store_use(config, flags)
    scope = job_scope(flags.output, flags.resume and not dry_run)  # one job: one budget, one limit per endpoint
    spent = (0.0, 0.0)  # what earlier invocations of the job spent
    held = (0.0, 0.0)  # what their batches still running hold (in the job's ledger, where there is one)
    shards: list[Sequence[str] | None] = [None] * len(targets)
    handed = [HandOff()] * len(targets)
    if not dry_run:  # a dry run sends nothing paid
        claim_output(flags, config, targets, run_id)
        if flags.resume:
            spent = spent_before(flags.output, scope)  # a --resume goes on with the same budget
            held = hold_live_batches((t.output for t in targets), scope)  # batches still running: their estimates
        firsts, before = [], (spent[0] + held[0], spent[1] + held[1])
        for t, row in zip(targets, first_rows, strict=True):  # the first paid requests, within the job's budget
            first = first_answer(t.config, row, t.output, flags, store, job=scope.id, spent=before)
            if first is not None:  # the next target's first request draws on what this one left
                before = (before[0] + first[1].tokens, before[1] + first[1].usd)
            firsts.append(first)
        for directory in dict.fromkeys([flags.output, *(t.output for t in targets)]):
            prepare_output(directory, flags.overwrite, resume=flags.resume)
        shards = [lookup_shards(t.config, t.output, store, flags.resume) for t in targets]  # before the hand-off
        handed = [hand_off(first, t.output) for t, first in zip(targets, firsts, strict=True)]  # into its journal
    paid, endpoints = first_paid([(t.config, h) for t, h in zip(targets, handed, strict=True)])  # the preflights'
    if not dry_run:
        record_job(flags.output, scope, paid, endpoints)
        record_job_config(flags.output, config, flags.resume)
    unledgered = held if scope.spend is None else (0.0, 0.0)  # a ledger holds them, and frees them as collected
    left = (spent[0] + unledgered[0] + paid[0], spent[1] + unledgered[1] + paid[1])  # what the workers' budget lacks
    branches = [
        TargetBranch(
            t.name,
            job_config(t.config, options, left, scope),  # W, the job's budget left, the job: for the pacers
            t.output,
            t.run_id,
            shards[i],
            staging_dir(t.output, t.run_id),  # outputs move into place only when the run has finished
            handed[i].reply,
        )
        for i, t in enumerate(targets)
    ]
    started = time.time()
    run_info = execute(options, config, branches, paths, limit)
    if dry_run:
        return {"status": "dry_run", "run": run_info}
    per_target, failed = {}, []
    labels = Counter(label for t in targets for label in set(endpoint_labels(t.config).values()))
    shared = frozenset(label for label, count in labels.items() if count > 1)  # a judge every target uses
    for t, branch in zip(targets, branches, strict=True):
        spend = job_spend(t.config, scope, shared)  # every invocation's, from the job's ledger
        try:
            per_target[t.name] = finish_run(
                t.config, t.output, branch.stage, t.run_id, store, paths, started, run_info, flags.history, spent, spend
            )
        except RunFailed as exc:
            if config.targets is None:
                raise
            failed.append(f"target {t.name!r}: {exc.message}")
    if config.targets is None:
        return per_target[""]
    if failed:
        raise RunFailed(
            f"{len(failed)} of {len(branches)} targets failed, so the leaderboard and comparisons were not written: "
            + "; ".join(failed),
            hint="Each target's rows/ and errors/ are in OUT_DIR/targets/NAME/; fix the cause and rerun with --resume.",
        )
    total = job_spend(config, scope).total
    directories = {t.name: t.output for t in targets}
    return publish_leaderboard(options, flags, config, per_target, directories, run_info, spent, total, started)


def execute(
    options: PipelineOptions,
    config: EvalConfig,
    branches: list[TargetBranch],
    paths: list[str],
    limit: int | None,
    progress: bool = True,
) -> dict[str, Any]:
    """Build the job's Beam graph, run it to the end; return the run facts every target's results.json records.

    ``progress``: show the first target's progress on a local runner. The Beam counters are
    the whole job's (every target's requests together).
    """
    started = time.time()
    pipeline = beam.Pipeline(runner=choose_runner(options), options=options)  # locally never fetches Prism
    build_job_graph(pipeline, config, branches, paths, limit)
    interval, _, local = progress_settings(options)
    try:
        with watch_progress(branches[0].run_id, interval if local and progress else 0.0):  # one bar or line
            result = pipeline.run()
            result.wait_until_finish()
    finally:
        # Workers that ran in this process leave their engines behind; close them so the next run
        # here (tests, notebooks, the next --decide wave) starts with fresh connections and limits.
        InferenceEngine.close_all()
        JournalWriter.close_all()  # the responses of this process's workers, flushed and closed
        RunBudget.close_all()  # its spend logs, written and closed before the spend is read
    return {
        **runner_info(options),
        **pipeline_metrics(result),
        "wall_time_s": round(time.time() - started, 3),
        "dataset_files": len(paths),
    }
