"""``--decide`` with ``targets:``: each candidate against the first target, in waves, until every one is decided.

The first target is the baseline and is evaluated in the same waves (one multi-target Beam
job per wave, each target on its own branch with its own filter: ``TargetBranch.wave``). After
each wave every undecided candidate's paired differences with the first target go through
``decide_wave`` with K counting every candidate's gated scores (the NO-GO family of the whole
run). A decided candidate's rows freeze where it decided (later waves answer them from its
journal and send nothing for it); the run stops when every candidate is decided, or after
the last row. Each ``OUT/targets/NAME/`` is a run directory with ``eval_order`` and
``skip_reason`` in rows/ (a candidate's results.json carries its own ``decision``);
every target's results.json counts its requests over all the waves
(``pipeline.decide_usage``); every target and wave draws from the job's one budget
(``pipeline.decide_job``), and a budget that runs out inside a wave stops the run (exit 5);
``OUT/results.json`` is the leaderboard with ``decision`` (the overall verdict and one block
per candidate), and ``OUT/comparison.json`` one entry per candidate.

Unlike a single-target run, the preflight sends no request here (each target's first
answer would be a paid request outside the waves' accounting); its free checks still run.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from beameval.compare.policy import OK_RATE
from beameval.compare.sequential import decide_wave
from beameval.compare.verdict import GO, INCONCLUSIVE, NO_GO, Verdict
from beameval.compare.wave_order import evaluation_order, wave_ends
from beameval.config.decide import DecideConfig
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.core.scoring import RowScorer
from beameval.report.leaderboard_page import render_leaderboard_report
from pipeline.cache import lookup_shards, run_store_use
from pipeline.compare_pair import load_policy
from pipeline.compare_runs import score_ranges
from pipeline.decide_dataset import row_count
from pipeline.decide_job import spent_after_wave, wave_job, wave_spend
from pipeline.decide_outputs import COMPARISON_FILE
from pipeline.decide_rows import add_order_columns, paired_differences, read_side, skipped_in_waves
from pipeline.decide_rules import gated_scores, group_members, sequential_scores
from pipeline.decide_usage import whole_run, whole_run_info
from pipeline.finish import finish_run
from pipeline.graph import TargetBranch
from pipeline.job import endpoint_labels, job_scope, record_job, spent_before
from pipeline.job_record import record_job_config
from pipeline.leaderboard import build_leaderboard
from pipeline.multi import target_dir
from pipeline.options import EvalOptions
from pipeline.orchestrate import claim_output, execute, job_limit, job_paths, job_targets
from pipeline.output_dir import prepare_output, staging_dir
from pipeline.preflight import preflight
from pipeline.quota import budget_block, job_config
from pipeline.report import report_after_run
from pipeline.results import RESULTS_FILE, write_json_atomically
from transforms.decide import DECIDED, DECIDED_MESSAGE, MarkDecided

__all__ = ["run_decided_targets"]


def run_decided_targets(options: PipelineOptions, flags: EvalOptions, config: EvalConfig) -> dict[str, Any]:
    """Run ``--decide`` over ``targets:`` (see the module docstring); return the top-level results document.

    Raises:
        EvaluatorError: fewer than two targets, ``--baseline`` given, or anything a run raises.
    """
    assert config.targets is not None
    if len(config.targets) < 2 or flags.baseline:
        raise EvaluatorError(
            "--decide with targets: compares each target with the first, so it needs at least two targets and no "
            "--baseline."
        )
    settings = config.decide or DecideConfig()
    policy = load_policy(flags.policy)
    level = policy.confidence_level(config.statistics.confidence_level)
    targets = job_targets(config, flags.output, uuid.uuid4().hex)
    configs = {t.name: t.config for t in targets}
    names = list(configs)
    base_name, candidates = names[0], names[1:]
    paths = job_paths(config, flags.output)
    for single in configs.values():
        preflight(single, paths)  # the free checks only (see the module docstring)
    limit = job_limit(flags, config)
    total = row_count(paths, config.dataset.format)
    domain = np.arange(total if limit is None else min(total, limit), dtype=np.int64)
    positions = evaluation_order(domain, settings.seed)
    in_order = domain[np.argsort(positions)]
    order = {int(row): int(position) for row, position in zip(domain, positions, strict=True)}
    ends = wave_ends(len(in_order), settings.wave_rows)
    store = run_store_use(config, flags)
    run_ids = {t.name: t.run_id for t in targets}
    scope = job_scope(flags.output, flags.resume)  # one job: one budget for every target and wave (decide_job)
    labels = Counter(label for single in configs.values() for label in set(endpoint_labels(single).values()))
    shared = frozenset(label for label, count in labels.items() if count > 1)  # a judge every target uses
    claim_output(flags, config, targets, uuid.uuid4().hex)
    started = time.time()
    frozen: dict[str, int] = {}  # a decided candidate: the rows it decided on
    verdicts: dict[str, Verdict | None] = dict.fromkeys(candidates)
    waves: dict[str, list[dict[str, Any]]] = {name: [] for name in candidates}
    jobs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}  # each target's results, wave by wave
    infos: list[dict[str, Any]] = []
    gated: list[tuple[str, float, float]] = []
    groups: list[tuple[str, np.ndarray]] = []
    spent, budget_hit = (0.0, 0.0), False  # what the job spent before the wave; whether a wave ran out of budget
    for number, end in enumerate(ends):
        resume = flags.resume or number > 0
        prepare_output(flags.output, flags.overwrite and number == 0, resume=resume)
        if number == 0:
            spent = spent_before(flags.output, scope) if flags.resume else (0.0, 0.0)
            record_job(flags.output, scope)
            record_job_config(flags.output, config, flags.resume)
        job = wave_job(scope, number)
        branches = []
        for name, single in configs.items():
            directory = target_dir(flags.output, name)
            prepare_output(directory, flags.overwrite and number == 0, resume=resume)
            wave = MarkDecided(int(row) for row in in_order[: frozen.get(name, end)])
            branches.append(
                TargetBranch(
                    name,
                    job_config(single, options, spent, job),
                    directory,
                    run_ids[name],
                    lookup_shards(single, directory, store, resume),
                    staging_dir(directory, run_ids[name]),
                    wave=wave,
                )
            )
        infos.append(execute(options, config, branches, paths, limit, progress=False))
        for branch in branches:
            results = finish_run(
                configs[branch.name],
                branch.output,
                branch.stage,
                branch.run_id,
                store,
                paths,
                started,
                infos[-1],
                None,
                spent,
                wave_spend(configs[branch.name], job, number, shared),
            )
            jobs[branch.name].append(results)
        spent = spent_after_wave(scope, spent, [jobs[name][-1] for name in names])
        base_dir = target_dir(flags.output, base_name)
        if number == 0:
            ranges = score_ranges(jobs[base_name][0])
            score_names = [n for n in RowScorer(config.metrics).score_names if n in ranges]
            gated = gated_scores(score_names, policy, ranges)
            groups = group_members(config, read_side(base_dir, [], with_items=True), policy)
        measured = [name for name, _, _ in gated if name != OK_RATE]
        base = read_side(base_dir, measured)
        family = len(candidates) * len(gated) * (1 + len(groups))
        budget_hit = any(  # rows of the waves so far skipped all the same: the job's budget ran out
            skipped_in_waves(read_side(target_dir(flags.output, name), []), order, frozen.get(name, end))
            for name in names
        )
        for name in candidates:
            if verdicts[name] is not None:
                continue
            pairs = paired_differences(base, read_side(target_dir(flags.output, name), measured), order, end)
            scores = sequential_scores(gated, groups, pairs, policy)
            decision = decide_wave(scores, level, last=end == ends[-1], family=family)
            waves[name].append({"rows": end, "scores": decision.scores})
            if decision.verdict is not None:
                verdicts[name], frozen[name] = decision.verdict, end
        if budget_hit or all(verdict is not None for verdict in verdicts.values()):
            break
    per_target = {name: whole_run(configs[name], done) for name, done in jobs.items()}
    run_info = whole_run_info(infos)
    fields = _job_fields(config, spent, budget_hit)
    return _finish(flags, config, per_target, run_info, verdicts, waves, frozen, order, settings, len(in_order), fields)


def _finish(
    flags: EvalOptions,
    config: EvalConfig,
    per_target: dict[str, dict[str, Any]],
    run_info: dict[str, Any],
    verdicts: dict[str, Verdict | None],
    waves: dict[str, list[dict[str, Any]]],
    frozen: dict[str, int],
    order: dict[int, int],
    settings: DecideConfig,
    rows_total: int,
    job: dict[str, Any],
) -> dict[str, Any]:
    """Order columns in every target's rows/, each candidate's decision, the leaderboard and comparison.json.

    ``job``: the leaderboard's fields about the job's budget (``_job_fields``).
    """
    blocks: dict[str, dict[str, Any]] = {}
    base_name = next(iter(per_target))
    budget_hit = job.get("stopped") == "budget"
    for name, results in per_target.items():
        directory = target_dir(flags.output, name)
        add_order_columns(directory, order, DECIDED_MESSAGE)
        if not budget_hit and results.get("stopped") == "budget" and (results.get("counts") or {}).get("skipped"):
            results["stopped"] = DECIDED  # finish_run saw skipped rows: every one was left unsent by a decision
        if name == base_name:  # its usage now covers every wave
            write_json_atomically(FileSystems.join(directory, RESULTS_FILE), results)
            continue
        verdict = verdicts[name] or INCONCLUSIVE
        blocks[name] = {
            "verdict": verdict,
            "seed": settings.seed,
            "wave_rows": settings.wave_rows,
            "rows_evaluated": frozen.get(name, waves[name][-1]["rows"] if waves[name] else 0),
            "rows_total": rows_total,
            "baseline_run_id": (per_target[base_name].get("provenance") or {}).get("run_id"),
            "baseline_target": base_name,
            "waves": waves[name],
        }
        results["decision"] = blocks[name]
        write_json_atomically(FileSystems.join(directory, RESULTS_FILE), results)
        report_after_run(directory, results)  # its page with the decision section
    overall = _overall(list(blocks.values()))
    top = {**build_leaderboard(per_target, config.public_dump(), run_info), **job}
    top["decision"] = {
        "verdict": overall,
        "seed": settings.seed,
        "wave_rows": settings.wave_rows,
        "rows_total": rows_total,
        "rows_evaluated": max(int(b["rows_evaluated"]) for b in blocks.values()),  # the baseline's
        "candidates": blocks,
    }
    comparison = {
        "verdict": overall,
        "method": "anytime-valid confidence sequence (--decide)",
        "baseline": base_name,
        "comparisons": [{"candidate": name, "verdict": b["verdict"], "decision": b} for name, b in blocks.items()],
    }
    write_json_atomically(FileSystems.join(flags.output, RESULTS_FILE), top)
    write_json_atomically(FileSystems.join(flags.output, COMPARISON_FILE), comparison)
    with FileSystems.create(FileSystems.join(flags.output, "report.html")) as handle:
        handle.write(render_leaderboard_report(top, None).encode("utf-8"))
    return top


def _job_fields(config: EvalConfig, spent: tuple[float, float], budget_hit: bool) -> dict[str, Any]:
    """The leaderboard's fields about the job's budget: its spend over every target and wave (``usage.budget``).

    When the budget ran out inside the waves, also ``status: "stopped"``, ``complete: false``
    and ``stopped: "budget"`` (exit 5).
    """
    fields: dict[str, Any] = {"status": "stopped", "complete": False, "stopped": "budget"} if budget_hit else {}
    budget = config.params.budget
    if budget is not None:
        fields["usage"] = {"budget": budget_block(budget, spent)}
    return fields


def _overall(blocks: list[dict[str, Any]]) -> Verdict:
    """NO-GO if any candidate is, GO if every one is, else INCONCLUSIVE."""
    seen = {b["verdict"] for b in blocks}
    return NO_GO if NO_GO in seen else GO if seen == {GO} else INCONCLUSIVE
