"""One baseline/candidate pair, from plan to document: what ``pipeline.compare`` and ``targets_compare`` share.

A single comparison (``pipeline.compare``) and a multi-target run's comparisons
(``pipeline.targets_compare``, one pair per candidate in one pipeline, one Holm family) differ
only in how many pairs they gate at once. What a pair compares (``plan_pair``), the Beam join
that pairs its rows (``pair_rows``), the gate's input (``gate_input``) and the document written
for it (``comparison_document``) are built here, so both commands say the same thing about a pair.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter

from beameval.compare.gate import ComparisonInput, GateResult, GroupInput, ScoreInput
from beameval.compare.pairing import BASELINE, CANDIDATE, SIDES, PairTally
from beameval.compare.policy import OK_RATE, GatePolicy, parse_policy
from beameval.core.errors import ConfigError, EvaluatorError
from beameval.judges.trust import uncalibrated_judges
from beameval.stats.breakdown import group_order, parse_scope
from pipeline.compare_runs import Run, config_group_by, record_count, run_summary, score_ranges
from pipeline.results import read_json
from transforms import NAMESPACE
from transforms.pair import PairRuns, RunRows, bucket_count

__all__ = [
    "PairPlan",
    "comparison_document",
    "flips_counted",
    "gate_input",
    "load_policy",
    "pair_rows",
    "plan_pair",
    "refuse_bad_keys",
    "take_tally",
]


@dataclass
class PairPlan:
    """What a pair compares: the scores both runs have, the warnings, each side's rows, the gated groups."""

    names: list[str]
    warnings: list[str]
    sides: dict[int, RunRows]
    group_by: list[str]


def load_policy(path: str | None) -> GatePolicy:
    """The gate policy at ``path`` (any Beam file system), or the default policy for None.

    Raises:
        ConfigError: the file cannot be read or is not a valid policy.
    """
    if path is None:
        return GatePolicy()
    try:
        with FileSystems.open(path) as handle:
            text = handle.read().decode("utf-8")
    except Exception as exc:  # noqa: BLE001 - every file system raises its own types
        raise ConfigError(f"cannot read policy file {path!r}: {exc}.") from None
    return parse_policy(text, f"policy file {path!r}")


def plan_pair(
    baseline: Run,
    candidate: Run,
    policy: GatePolicy,
    policy_path: str | None,
    lacking: str,
    group_by: list[str] | None = None,
) -> PairPlan:
    """Plan one pair; refused when the policy gates a score the pair does not compare.

    Args:
        baseline: the baseline run.
        candidate: the candidate run.
        policy: the gate policy, whose score names must be compared scores.
        policy_path: where the policy came from, for the message.
        lacking: who lacks an unknown score, for the message (e.g. "both runs do not have").
        group_by: the gated group fields; None takes the candidate's statistics.group_by, else the baseline's.

    Raises:
        EvaluatorError: a side has no rows to compare.
        ConfigError: the policy names a score the pair does not compare.
    """
    names, warnings, sides = _scores_and_rows(baseline, candidate)
    unknown = policy.unknown_scores(names)
    if unknown:
        raise ConfigError(
            f"policy file {policy_path!r} gates {', '.join(map(repr, unknown))}, which {lacking}; "
            f"the compared scores are: {', '.join(names) or 'none'}. Fix the score names in the policy."
        )
    return PairPlan(names, warnings, sides, group_by or config_group_by(candidate) or config_group_by(baseline))


def _scores_and_rows(baseline_run: Run, candidate_run: Run) -> tuple[list[str], list[str], dict[int, RunRows]]:
    """The scores both runs have as row columns, warnings, and each side's rows to read."""
    baseline, candidate = baseline_run.results, candidate_run.results
    columns: dict[int, set[str]] = {}
    sides: dict[int, RunRows] = {}
    for side, run in ((BASELINE, baseline_run), (CANDIDATE, candidate_run)):
        directory, results = run.directory, run.results
        pattern = FileSystems.join(directory, "rows", "*.parquet")
        files = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
        if not files:
            raise EvaluatorError(f"the {SIDES[side]} run {directory!r} has no rows/*.parquet files to compare.")
        with FileSystems.open(files[0]) as handle:
            schema = pq.ParquetFile(handle).schema_arrow
        floats = {f.name for f in schema if pa.types.is_floating(f.type)}
        names = [s["name"] for s in (results.get("aggregate_scores") or {}).get("scores", [])]
        columns[side] = {name for name in names if name in floats}
        sides[side] = RunRows(pattern, "sample_index" in schema.names)
    base_names = [s["name"] for s in baseline["aggregate_scores"]["scores"] if s["name"] in columns[BASELINE]]
    names = [name for name in base_names if name in columns[CANDIDATE]]
    warnings = []
    only = {side: sorted(columns[side] - set(names)) for side in (BASELINE, CANDIDATE)}
    for side, missing in only.items():
        if missing:
            warnings.append(f"only the {SIDES[side]} has {', '.join(missing)}; not compared.")
    base_hash, cand_hash = ((r.get("provenance") or {}).get("eval_hash") for r in (baseline, candidate))
    if base_hash and cand_hash and base_hash != cand_hash:
        warnings.append(
            f"the runs' eval_hash differ ({base_hash[:12]} vs {cand_hash[:12]}): the dataset, prompt, metrics or "
            "inference parameters changed as well as the target, and the deltas include that change."
        )
    return names, warnings, sides


def pair_rows(
    pipeline: beam.Pipeline,
    name: str | None,
    pair: tuple[Run, Run, PairPlan],
    key: str,
    tally_path: str,
    flips_path: str,
) -> None:
    """Add the pair's join to ``pipeline``: its tally goes to ``tally_path``, its flipped rows to ``flips_path``.

    ``name`` tells the joins of one pipeline apart (a multi-target run's candidate; None for
    the only one): it suffixes the steps' labels, by which ``flips_counted`` finds the counter.
    """
    baseline, candidate, plan = pair
    rows = max(record_count(baseline.results), record_count(candidate.results))
    suffix = _suffix(name)
    joined = pipeline | f"PairRuns{suffix}" >> PairRuns(
        plan.sides[BASELINE], plan.sides[CANDIDATE], key, plan.names, bucket_count(rows), plan.group_by
    )
    _ = joined["tally"] | f"WriteTally{suffix}" >> beam.Map(_write_json, tally_path)
    _ = joined["flips"] | f"WriteFlips{suffix}" >> beam.io.WriteToText(flips_path, shard_name_template="", num_shards=1)


def _suffix(name: str | None) -> str:
    return "" if name is None else f"-{name}"


def _write_json(data: dict[str, Any], path: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(json.dumps(data).encode("utf-8"))


def take_tally(path: str) -> PairTally:
    """Read the tally a join wrote and delete its file (it is scaffolding, not part of the output)."""
    tally = PairTally.from_dict(read_json(path))
    FileSystems.delete([path])
    return tally


def flips_counted(result: beam.runners.runner.PipelineResult, name: str | None) -> int | None:
    """The flipped pairs the join ``name`` counted (None where the runner reports no metrics)."""
    try:
        step = f"PairRuns{_suffix(name)}"
        query = MetricsFilter().with_namespace(NAMESPACE).with_name("compare_flips").with_step(step)
        found = result.metrics().query(query)["counters"]
    except (NotImplementedError, AttributeError, KeyError):
        return None
    return sum(int(c.committed if c.committed is not None else c.attempted) for c in found)


def refuse_bad_keys(tally: PairTally, key: str, baseline: Run, candidate: Run) -> None:
    """Refuse a pairing whose ``key`` is duplicated or missing on either side: its pairs would be wrong.

    Raises:
        EvaluatorError: naming the side, an example and what to pass instead.
    """
    dirs = {BASELINE: baseline.directory, CANDIDATE: candidate.directory}
    for side in (BASELINE, CANDIDATE):
        example = tally.duplicate_example[side]
        if example is not None:
            raise EvaluatorError(
                f"--key {key!r} is not unique in the {SIDES[side]} run {dirs[side]!r}: {example[0]} is on rows "
                f"{example[1]} and {example[2]} ({tally.duplicates[side]} duplicated keys in all). Pass a --key that "
                "identifies each row (e.g. an id field), or the default row_index."
            )
        missing = tally.missing_example[side]
        if missing is not None:
            raise EvaluatorError(
                f"--key {key!r}: {tally.missing_key[side]} rows of the {SIDES[side]} run {dirs[side]!r} have no field "
                f"{key!r} (the first is row {missing}). Pass a field every row has, or the default row_index."
            )


#: Below this share of either side's rows paired, two runs over different datasets are refused.
MIN_PAIRED_SHARE = 0.9


def check_datasets(tally: PairTally, baseline: Run, candidate: Run, allow_change: bool) -> str | None:
    """A warning when the runs read different datasets; refused when too few rows pair as well.

    Runs whose dataset fingerprints differ may still be comparable (a few rows added or
    fixed): they are compared, with a warning, when at least 90% of each side's rows pair.
    Below that the deltas describe two datasets, not two models, and a GO would be a
    verdict about nothing; ``--allow_dataset_change`` says the user means it.

    Raises:
        EvaluatorError: the fingerprints differ, fewer than 90% of a side's rows pair and the
            change was not allowed (naming both datasets).
    """
    described = [_dataset(run) for run in (baseline, candidate)]
    if described[0][1] is None or described[1][1] is None or described[0][1] == described[1][1]:
        return None
    rows = [tally.keys[side] + tally.unkeyed[side] for side in (BASELINE, CANDIDATE)]
    shares = [tally.paired / n if n else 0.0 for n in rows]
    text = (
        f"the runs read different datasets: the baseline {described[0][0]!r} (fingerprint {described[0][1][:12]}) "
        f"and the candidate {described[1][0]!r} (fingerprint {described[1][1][:12]}); {tally.paired} rows pair "
        f"({shares[0]:.0%} of the baseline's {rows[0]}, {shares[1]:.0%} of the candidate's {rows[1]})"
    )
    if min(shares) < MIN_PAIRED_SHARE and not allow_change:
        raise EvaluatorError(
            f"{text}, fewer than {MIN_PAIRED_SHARE:.0%} of a side's rows: the deltas would compare two datasets, not "
            "two models. Compare runs over the same dataset, or pass --allow_dataset_change if the change is meant."
        )
    return f"{text}: the deltas include the change of data."


def _dataset(run: Run) -> tuple[str, str | None]:
    """The run's dataset path as configured and its content fingerprint (None for a run without provenance)."""
    path = ((run.results.get("config") or {}).get("dataset") or {}).get("path")
    fingerprint = ((run.results.get("provenance") or {}).get("dataset") or {}).get("fingerprint")
    return str(path), None if fingerprint is None else str(fingerprint)


def gate_input(tally: PairTally, plan: PairPlan, baseline: Run, candidate: Run) -> ComparisonInput:
    """The gate's input: each score's sums and known range, ok_rate, and each group's sums."""
    names, group_by = plan.names, plan.group_by
    ranges = {**score_ranges(candidate.results), **score_ranges(baseline.results)}
    unpaired = (tally.unpaired[BASELINE], tally.unpaired[CANDIDATE])
    judges = uncalibrated_judges(baseline.results, candidate.results)
    scores = [
        ScoreInput(name, sums, ranges.get(name), *unpaired, nan, judges.get(name))
        for name, sums, nan in zip(names, tally.scores, tally.nan_excluded, strict=True)
    ]
    scores.append(ScoreInput(OK_RATE, tally.ok_rate, (0.0, 1.0), *unpaired))
    groups = []
    for scope in sorted(tally.groups, key=lambda scope: group_order(*parse_scope(scope))):
        position, value = parse_scope(scope)
        sums = tally.groups[scope]
        members = [
            ScoreInput(name, part, ranges.get(name), uncalibrated_judge=judges.get(name))
            for name, part in zip(names, sums, strict=False)
        ]
        members.append(ScoreInput(OK_RATE, sums[-1], (0.0, 1.0)))
        groups.append(GroupInput(group_by[position], value, tally.group_paired.get(scope, 0), members))
    stopped = [f"the {SIDES[side]} run stopped at its {run.stopped}" for side, run in enumerate((baseline, candidate))]
    early = [text for text, run in zip(stopped, (baseline, candidate), strict=True) if run.stopped is not None]
    return ComparisonInput(scores, groups, "; ".join(early) or None)


def comparison_document(
    gated: GateResult,
    pair: tuple[Run, Run, PairPlan],
    tally: PairTally,
    policy: dict[str, Any],
    key: str,
    flips: dict[str, Any],
) -> dict[str, Any]:
    """A pair's ``comparison.json`` document, verdict to notes (the caller adds its own keys and the message).

    Args:
        gated: the gate's result for this pair.
        pair: the baseline, the candidate and the pair's plan.
        tally: the join's tally.
        policy: the policy as described in the document.
        key: the field the rows were paired by.
        flips: where the flipped rows are and how many.
    """
    baseline, candidate, plan = pair
    return {
        "verdict": gated.verdict,
        "scores": gated.scores,
        **({"groups": gated.groups} if plan.group_by else {}),
        "policy": policy,
        "holm_family": gated.family_size,
        "key": key,
        "group_by": plan.group_by,
        "counts": _counts(tally),
        "baseline": run_summary(baseline),
        "candidate": run_summary(candidate),
        "flips": flips,
        "warnings": plan.warnings,
        "notes": gated.notes,
    }


def _counts(tally: PairTally) -> dict[str, int]:
    return {
        "baseline_rows": tally.keys[BASELINE] + tally.unkeyed[BASELINE],
        "candidate_rows": tally.keys[CANDIDATE] + tally.unkeyed[CANDIDATE],
        "paired": tally.paired,
        "unpaired_baseline": tally.unpaired[BASELINE],
        "unpaired_candidate": tally.unpaired[CANDIDATE],
        "failed_baseline": tally.failed[BASELINE] + tally.unkeyed[BASELINE],
        "failed_candidate": tally.failed[CANDIDATE] + tally.unkeyed[CANDIDATE],
    }
