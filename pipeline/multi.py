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
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

from beameval.cache.journal import JournalWriter
from beameval.config.schema import EvalConfig
from beameval.core.errors import EvaluatorError
from beameval.inference.engine import InferenceEngine
from beameval.report.leaderboard_page import render_leaderboard_report
from pipeline.cache import lookup_shards, run_store_use
from pipeline.finish import RunFailed, finish_run, pipeline_metrics, runner_info
from pipeline.first_answer import HandOff, first_answer, hand_off
from pipeline.graph import TargetBranch, build_targets_graph
from pipeline.leaderboard import build_leaderboard
from pipeline.local_runner import choose_runner
from pipeline.options import EvalOptions, progress_settings
from pipeline.output_dir import lock_output, prepare_output, refuse_dataset_overlap, staging_dir
from pipeline.preflight import preflight
from pipeline.quota import job_config, spent_before
from pipeline.report import COMPARISON_FILE
from pipeline.results import RESULTS_FILE, write_json_atomically
from pipeline.targets_compare import compare_targets
from transforms.progress import watch_progress
from transforms.read import list_dataset_files

__all__ = ["TARGETS_DIR", "run_targets", "target_dir"]

#: ``OUT_DIR/targets/NAME/``: each target's complete run directory.
TARGETS_DIR = "targets"
REPORT_FILE = "report.html"


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
    run_ids = {name: uuid.uuid4().hex for name in configs}  # each target is a run of its own
    firsts = {}  # each target's answer to the first row's request (none on a dry run)
    if not dry_run:
        lock_output(flags.output, uuid.uuid4().hex)  # one run at a time per OUT_DIR (its targets/ included)
        for name, single in configs.items():
            directory = target_dir(flags.output, name)
            firsts[name] = first_answer(single, first_rows[name], directory, flags, store, job=run_ids[name])
        prepare_output(flags.output, flags.overwrite, resume=flags.resume)
        for name in configs:
            prepare_output(target_dir(flags.output, name), flags.overwrite, resume=flags.resume)
    branches, spent = [], {}
    for name, single in configs.items():
        directory, run_id = target_dir(flags.output, name), run_ids[name]
        shards = None if dry_run else lookup_shards(single, directory, store, flags.resume)  # before the hand-off
        handed = HandOff() if dry_run else hand_off(firsts.get(name), directory)  # into the target's journal
        spent[name] = spent_before(directory) if flags.resume and not dry_run else (0.0, 0.0)
        job = job_config(single, options, handed.spent_after(spent[name]))  # worker count and budget left
        stage = staging_dir(directory, run_id)
        branches.append(TargetBranch(name, job, directory, run_id, shards, stage, handed.reply))

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
                spent[branch.name],
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
    comparison = None
    if len(branches) > 1:
        directories = {branch.name: branch.output for branch in branches}
        comparison = compare_targets(flags.output, directories, flags.policy, options)
        write_json_atomically(FileSystems.join(flags.output, COMPARISON_FILE), comparison)
    results["run"]["wall_time_s"] = round(time.time() - started, 3)
    write_json_atomically(FileSystems.join(flags.output, RESULTS_FILE), results)
    with FileSystems.create(FileSystems.join(flags.output, REPORT_FILE)) as handle:
        handle.write(render_leaderboard_report(results, comparison).encode("utf-8"))
    return {**results, "comparison": comparison}
