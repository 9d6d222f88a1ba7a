"""The comparisons of a multi-target run: every candidate against the first target, one Holm family for all.

Each candidate's rows are paired with the baseline's by the same Beam join ``pipeline.compare``
runs (``transforms.pair.PairRuns``, one per candidate, all in one pipeline), and each pair's
document is built from the same pieces ``pipeline.compare`` uses; only the gate differs:
``gate_comparisons`` receives every comparison at once, so ``p_regression_adjusted`` is
Holm-adjusted across every (candidate x gated score), groups included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from beameval.compare.gate import gate_comparisons
from beameval.compare.messages import verdict_message
from beameval.compare.pairing import BASELINE, CANDIDATE, PairTally
from beameval.core.errors import ConfigError
from pipeline.compare import (
    _config_group_by,
    _config_level,
    _counts,
    _gate_input,
    _load_policy,
    _load_run,
    _plan,
    _records,
    _refuse_bad_keys,
    _Run,
    _run_summary,
    _write_json,
)
from pipeline.local_runner import choose_runner
from pipeline.results import read_json
from transforms import NAMESPACE
from transforms.pair import ROW_INDEX, PairRuns, bucket_count

__all__ = ["FLIPS_DIR", "compare_targets"]

#: ``OUT_DIR/flips/NAME.jsonl``: the rows whose scores changed between the baseline and candidate NAME.
FLIPS_DIR = "flips"


@dataclass
class _Pair:
    name: str
    run: _Run
    names: list[str]
    warnings: list[str]
    group_by: list[str]
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
    policy = _load_policy(policy_path)
    (base_name, base_dir), *others = directories.items()
    baseline = _load_run(base_dir, "baseline")
    pairs = []
    for name, directory in others:
        candidate = _load_run(directory, "candidate")
        names, warnings, _ = _plan(baseline, candidate)
        unknown = policy.unknown_scores(names)
        if unknown:
            raise ConfigError(
                f"policy file {policy_path!r} gates {', '.join(map(repr, unknown))}, which targets {base_name!r} and "
                f"{name!r} do not both have; the compared scores are: {', '.join(names) or 'none'}."
            )
        group_by = _config_group_by(candidate) or _config_group_by(baseline)
        tally_path = FileSystems.join(output, f"_tally-{name}.json")
        flips_path = FileSystems.join(output, FLIPS_DIR, f"{name}.jsonl")
        pairs.append(_Pair(name, candidate, names, warnings, group_by, tally_path, flips_path))
    results = _pair_all(baseline, pairs, options)
    level = policy.confidence_level(_config_level(baseline))
    tallies = [PairTally.from_dict(read_json(pair.tally_path)) for pair in pairs]
    FileSystems.delete([pair.tally_path for pair in pairs])
    for pair, tally in zip(pairs, tallies, strict=True):
        _refuse_bad_keys(tally, ROW_INDEX, {BASELINE: baseline.directory, CANDIDATE: pair.run.directory})
    inputs = [_gate_input(t, p.names, p.group_by, baseline, p.run) for p, t in zip(pairs, tallies, strict=True)]
    gated = gate_comparisons(inputs, policy, level)
    comparisons = []
    for pair, tally, result in zip(pairs, tallies, gated, strict=True):
        comparison = {
            "target": pair.name,
            "verdict": result.verdict,
            "scores": result.scores,
            **({"groups": result.groups} if pair.group_by else {}),
            "policy": policy.described(policy_path, level),
            "key": ROW_INDEX,
            "group_by": pair.group_by,
            "counts": _counts(tally),
            "baseline": _run_summary(baseline),
            "candidate": _run_summary(pair.run),
            "flips": {"path": pair.flips_path, "rows": _flips(results, pair.name)},
            "warnings": pair.warnings,
            "notes": result.notes,
        }
        comparison["message"] = verdict_message(comparison, pair.flips_path)
        comparisons.append(comparison)
    gated_scores = sum(1 for c in comparisons for s in _all_scores(c) if s["gated"])
    return {
        "baseline_target": base_name,
        "targets": list(directories),
        "comparisons": comparisons,
        "correction": {"method": policy.correction, "comparisons": len(comparisons), "gated_scores": gated_scores},
        "policy": policy.described(policy_path, level),
    }


def _pair_all(baseline: _Run, pairs: list[_Pair], options: PipelineOptions) -> beam.runners.runner.PipelineResult:
    """One Beam pipeline with a PairRuns join per candidate; each writes its tally and its flips."""
    pipeline = beam.Pipeline(runner=choose_runner(options), options=options)
    for pair in pairs:
        _, _, sides = _plan(baseline, pair.run)
        rows = max(_records(baseline.results), _records(pair.run.results))
        joined = pipeline | f"PairRuns-{pair.name}" >> PairRuns(
            sides[BASELINE], sides[CANDIDATE], ROW_INDEX, pair.names, bucket_count(rows), pair.group_by
        )
        _ = joined["tally"] | f"WriteTally-{pair.name}" >> beam.Map(_write_json, pair.tally_path)
        _ = joined["flips"] | f"WriteFlips-{pair.name}" >> beam.io.WriteToText(
            pair.flips_path, shard_name_template="", num_shards=1
        )
    result = pipeline.run()
    result.wait_until_finish()
    return result


def _flips(result: beam.runners.runner.PipelineResult, name: str) -> int | None:
    """The flipped pairs counted by candidate ``name``'s join."""
    try:
        query = MetricsFilter().with_namespace(NAMESPACE).with_name("compare_flips").with_step(f"PairRuns-{name}")
        found = result.metrics().query(query)["counters"]
    except (NotImplementedError, AttributeError, KeyError):
        return None
    return sum(int(c.committed if c.committed is not None else c.attempted) for c in found)


def _all_scores(comparison: dict[str, Any]) -> list[dict[str, Any]]:
    scores = list(comparison["scores"])
    return scores + [s for g in comparison.get("groups") or [] for s in g["scores"]]
