"""The comparisons of a multi-target run: every candidate against the first target, one Holm family for all.

Each candidate's rows are paired with the baseline's by the same Beam join ``pipeline.compare``
runs (``transforms.pair.PairRuns``, one per candidate, all in one pipeline), and each pair's
document is built by the same ``pipeline.compare_pair`` builders ``pipeline.compare`` uses;
only the gate differs:
``gate_comparisons`` receives every comparison at once, so ``p_regression_adjusted`` is
Holm-adjusted across every (candidate x gated score), groups included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from beameval.compare.gate import gate_comparisons
from beameval.compare.messages import verdict_message
from pipeline.compare_pair import (
    PairPlan,
    comparison_document,
    flips_counted,
    gate_input,
    load_policy,
    pair_rows,
    plan_pair,
    refuse_bad_keys,
    take_tally,
)
from pipeline.compare_runs import Run, config_level, load_run
from pipeline.local_runner import choose_runner
from transforms.pair import ROW_INDEX

__all__ = ["FLIPS_DIR", "compare_targets"]

#: ``OUT_DIR/flips/NAME.jsonl``: the rows whose scores changed between the baseline and candidate NAME.
FLIPS_DIR = "flips"


@dataclass
class _Pair:
    name: str
    run: Run
    plan: PairPlan
    tally_path: str
    flips_path: str


def compare_targets(
    output: str, directories: dict[str, str], policy_path: str | None, options: PipelineOptions
) -> dict[str, Any]:
    """Compare every target after the first with the first; return the ``comparison.json`` document.

    Args:
        output: the multi-target run's OUT_DIR (flips go to ``OUT_DIR/flips/``).
        directories: each target's run directory, the baseline first, in the config's order.
        policy_path: ``--policy``, or None for the default policy.
        options: the run's Beam options (the same runner pairs the rows).

    Raises:
        ConfigError: the policy gates a score the runs do not have.
    """
    policy = load_policy(policy_path)
    (base_name, base_dir), *others = directories.items()
    baseline = load_run(base_dir, "baseline")
    pairs = []
    for name, directory in others:
        candidate = load_run(directory, "candidate")
        lacking = f"targets {base_name!r} and {name!r} do not both have"
        plan = plan_pair(baseline, candidate, policy, policy_path, lacking)
        tally_path = FileSystems.join(output, f"_tally-{name}.json")
        flips_path = FileSystems.join(output, FLIPS_DIR, f"{name}.jsonl")
        pairs.append(_Pair(name, candidate, plan, tally_path, flips_path))
    results = _pair_all(baseline, pairs, options)
    level = policy.confidence_level(config_level(baseline))
    tallies = [take_tally(pair.tally_path) for pair in pairs]
    for pair, tally in zip(pairs, tallies, strict=True):
        refuse_bad_keys(tally, ROW_INDEX, baseline, pair.run)
    inputs = [gate_input(t, p.plan, baseline, p.run) for p, t in zip(pairs, tallies, strict=True)]
    gated = gate_comparisons(inputs, policy, level)
    comparisons = []
    for pair, tally, result in zip(pairs, tallies, gated, strict=True):
        flips = {"path": pair.flips_path, "rows": flips_counted(results, pair.name)}
        document = comparison_document(
            result, (baseline, pair.run, pair.plan), tally, policy.described(policy_path, level), ROW_INDEX, flips
        )
        comparison = {"target": pair.name, **document}
        comparison["message"] = verdict_message(comparison, pair.flips_path)
        comparisons.append(comparison)
    gated_scores = gated[0].family_size if gated else 0  # the Holm family actually used, as printed
    return {
        "baseline_target": base_name,
        "targets": list(directories),
        "comparisons": comparisons,
        "correction": {"method": policy.correction, "comparisons": len(comparisons), "gated_scores": gated_scores},
        "policy": policy.described(policy_path, level),
    }


def _pair_all(baseline: Run, pairs: list[_Pair], options: PipelineOptions) -> beam.runners.runner.PipelineResult:
    """One Beam pipeline with a PairRuns join per candidate; each writes its tally and its flips."""
    pipeline = beam.Pipeline(runner=choose_runner(options), options=options)
    for pair in pairs:
        pair_rows(pipeline, pair.name, (baseline, pair.run, pair.plan), ROW_INDEX, pair.tally_path, pair.flips_path)
    result = pipeline.run()
    result.wait_until_finish()
    return result
