"""``--decide``: evaluate the candidate in waves against a completed baseline, and stop once the verdict is certain.

The rows are taken in a seeded random order (``beameval.compare.wave_order``; the order's
domain is the baseline's rows). Each wave is **one Beam job** over the whole dataset in which
the rows of the waves so far go to the target (those of earlier waves answered from the
run's journal, as with ``--resume``) and every other row is written ``skipped``
(``transforms.decide``). One job per wave rather than one long-lived job: a wave's job
finishes, publishes complete outputs (rows/, results.json) and so the driver reads exact
paired rows before it decides whether to pay for more, on every runner alike (local,
portable, Dataflow), with nothing streaming or stateful; a crash between waves leaves a
valid stopped run that ``--resume`` completes. The cost is a job's start-up per wave, which
``decide.wave_rows`` amortises. The final ``results.json`` counts every wave's requests
and tokens as one run's (``pipeline.decide_usage``), and every wave is part of OUT_DIR's
one job, so ``params.budget`` holds for all of them together (``pipeline.decide_job``).

After each wave the driver pairs the candidate's rows with the baseline's
(``pipeline.decide_rows``) and applies ``beameval.compare.sequential.decide_wave``. On a
decision the run ends: ``results.json`` gains ``complete: false``, ``stopped: "decided"``
and ``decision``; ``rows/`` gains ``eval_order`` and ``skip_reason``; ``OUT/comparison.json``
and the report show the verdict and how the bounds narrowed (``pipeline.decide_outputs``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from beameval.compare.policy import OK_RATE
from beameval.compare.sequential import decide_wave
from beameval.compare.verdict import INCONCLUSIVE
from beameval.compare.wave_order import evaluation_order, wave_ends
from beameval.config.decide import DecideConfig
from beameval.config.params import JobScope
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.scoring import RowScorer
from pipeline.cache import lookup_shards, run_store_use
from pipeline.compare_pair import load_policy
from pipeline.compare_runs import Run, score_ranges
from pipeline.decide_baseline import resolve_decide_baseline
from pipeline.decide_job import wave_job, wave_spend
from pipeline.decide_outputs import finish_decision
from pipeline.decide_rows import Side, paired_differences, read_side, skipped_in_waves
from pipeline.decide_rules import gated_scores, group_members, sequential_scores
from pipeline.decide_targets import run_decided_targets
from pipeline.decide_usage import whole_run
from pipeline.finish import finish_run
from pipeline.first_answer import FirstRow, HandOff, first_answer, hand_off
from pipeline.graph import TargetBranch
from pipeline.job import first_paid, job_scope, record_job, spent_before
from pipeline.job_record import check_resumed_config, record_job_config
from pipeline.options import EvalOptions
from pipeline.orchestrate import execute, job_paths
from pipeline.output_dir import lock_output, prepare_output, staging_dir
from pipeline.preflight import preflight
from pipeline.quota import job_config
from transforms.decide import MarkDecided

__all__ = ["run_decided"]


def run_decided(options: PipelineOptions, flags: EvalOptions, config: EvalConfig, run_id: str) -> dict[str, Any]:
    """Run ``--decide`` (see the module docstring); return the final results document (with ``decision``).

    Raises:
        EvaluatorError: a usage error (no target, several targets, no baseline, a gated score
            of unknown range) or anything a plain run raises.
    """
    if not flags.decide:
        raise EvaluatorError("--baseline belongs to --decide: add --decide, or gate with python -m pipeline.compare.")
    if config.targets is not None:  # each candidate against the first target
        return run_decided_targets(options, flags, config)
    if config.target is None:
        raise EvaluatorError("--decide needs a target: it decides whether to send the rest of the rows.")
    if not flags.baseline:
        raise EvaluatorError("--decide needs --baseline BASE (a completed run's output directory, or latest/previous).")
    settings = config.decide or DecideConfig()
    policy = load_policy(flags.policy)
    level = policy.confidence_level(config.statistics.confidence_level)
    baseline = resolve_decide_baseline(flags.baseline, flags.history, config, flags.output)
    names = [name for name in RowScorer(config.metrics).score_names if name in score_ranges(baseline.results)]
    gated = gated_scores(names, policy, score_ranges(baseline.results))
    base = read_side(baseline.directory, [g[0] for g in gated if g[0] != OK_RATE], with_items=True)
    groups = group_members(config, base, policy)
    limit = flags.limit if flags.limit is not None else config.params.limit_samples
    domain = base.row_index if limit is None else base.row_index[base.row_index < limit]
    positions = evaluation_order(domain, settings.seed)
    in_order = domain[np.argsort(positions)]
    order = {int(row): int(position) for row, position in zip(domain, positions, strict=True)}
    ends = wave_ends(len(in_order), settings.wave_rows)

    paths = job_paths(config, flags.output)
    preflight(config, paths)  # the free checks; the first request is the first row of the order, below
    store = run_store_use(config, flags)
    scope = job_scope(flags.output, flags.resume)  # one job for every wave: one budget (pipeline.decide_job)
    lock_output(flags.output, run_id)
    if flags.resume:  # before anything is sent: the journal answers the config it was started with
        check_resumed_config(flags.output, config)
    spent = spent_before(flags.output, scope) if flags.resume else (0.0, 0.0)  # the first request draws on what is left
    first = first_answer(config, _first_row(base, in_order), flags.output, flags, store, job=scope.id, spent=spent)
    started = time.time()
    waves: list[dict[str, Any]] = []
    verdict, budget_hit = None, False
    jobs: list[dict[str, Any]] = []  # each wave job's results document
    for number, end in enumerate(ends):
        resume = flags.resume or number > 0
        prepare_output(flags.output, flags.overwrite and number == 0, resume=resume)
        spent = spent_before(flags.output, scope) if resume else (0.0, 0.0)  # every earlier wave and invocation
        shards = lookup_shards(config, flags.output, store, resume)
        handed = hand_off(first, flags.output) if number == 0 else HandOff()
        if number == 0:
            record_job(flags.output, scope, *first_paid([(config, handed)]))
            record_job_config(flags.output, config, flags.resume)
        wave = MarkDecided(int(row) for row in in_order[:end])
        jobs.append(
            _run_wave(
                options, config, flags, run_id, paths, limit, shards, handed, spent, wave, store, started, scope, number
            )
        )
        if number == 0:
            _same_evaluation(jobs[0], baseline)
        candidate = read_side(flags.output, [g[0] for g in gated if g[0] != OK_RATE])
        pairs = paired_differences(base, candidate, order, end)
        decision = decide_wave(sequential_scores(gated, groups, pairs, policy), level, last=end == ends[-1])
        waves.append(
            {"rows": end, "requests": (jobs[-1].get("usage") or {}).get("requests"), "scores": decision.scores}
        )
        verdict = decision.verdict
        budget_hit = skipped_in_waves(candidate, order, end) > 0
        if verdict is None and budget_hit:  # the budget ran out inside the waves: nothing more can be sent
            verdict = INCONCLUSIVE
        if verdict is not None:
            break
    block = {
        "verdict": verdict,
        "seed": settings.seed,
        "wave_rows": settings.wave_rows,
        "rows_evaluated": waves[-1]["rows"],
        "rows_total": len(in_order),
        "baseline_run_id": (baseline.results.get("provenance") or {}).get("run_id"),
        "requests_sent": sum(w["requests"] or 0 for w in waves),
        "waves": waves,
    }
    return finish_decision(flags, whole_run(config, jobs), block, baseline, order, policy, level, budget_hit)


def _first_row(base: Side, in_order: np.ndarray) -> FirstRow | None:
    """The first row of the order, as the baseline recorded it: the preflight's real request is that row's."""
    if not len(in_order) or base.items is None:
        return None
    text = base.items[int(np.searchsorted(base.row_index, in_order[0]))]
    try:
        item = json.loads(text) if text else None
    except ValueError:
        return None
    return FirstRow(int(in_order[0]), item) if isinstance(item, dict) else None


def _same_evaluation(results: dict[str, Any], baseline: Run) -> None:
    """Refuse a baseline of another evaluation (dataset, prompt, metrics): its differences would mean nothing."""
    mine = (results.get("provenance") or {}).get("eval_hash")
    theirs = (baseline.results.get("provenance") or {}).get("eval_hash")
    if mine and theirs and mine != theirs:
        raise EvaluatorError(
            f"the baseline {baseline.directory!r} is another evaluation (eval_hash {theirs[:12]} vs this run's "
            f"{mine[:12]}: the dataset, prompt, metrics or inference parameters differ), so --decide cannot pair "
            "its rows. Pass a baseline of the same evaluation."
        )


def _run_wave(
    options: PipelineOptions,
    config: EvalConfig,
    flags: EvalOptions,
    run_id: str,
    paths: list[str],
    limit: int | None,
    shards: Any,
    handed: HandOff,
    spent: tuple[float, float],
    wave: MarkDecided,
    store: Any,
    started: float,
    scope: JobScope,
    number: int,
) -> dict[str, Any]:
    """Wave ``number``: one Beam job over the dataset (``orchestrate.execute``), published as a stopped or complete run.

    ``scope``: the run's job, which every wave is part of (``pipeline.decide_job``).
    """
    scope = wave_job(scope, number)
    stage = staging_dir(flags.output, run_id)
    job = job_config(config, options, handed.spent_after(spent), scope)
    branch = TargetBranch("", job, flags.output, run_id, shards, stage, handed.reply, wave)
    run_info = execute(options, config, [branch], paths, limit)  # the wave's rows shown as a plain run's
    spend = wave_spend(config, scope, number)
    return finish_run(config, flags.output, stage, run_id, store, paths, started, run_info, None, spent, spend)
