"""The release gate: from per-score paired sums (overall and per group) and a policy, the records and verdicts.

This is the one place the decision rule lives (CONTRACT "Gating, revised"); ``pipeline.compare``
and multi-target runs call :func:`gate_comparisons` with the sums their Beam joins produced.

For every gated score (margin ``m`` from the policy, see ``GatePolicy.margin``):

* the paired Student-t interval at ``confidence_level``, and the one-sided margin tests
  ``p_noninferiority`` and ``p_regression`` at ``a = (1 − confidence_level)/2``;
* ``p_regression_adjusted``: Holm over the ``p_regression`` of every gated score of every
  comparison passed in, group scores included (``correction: none`` leaves them); a score
  that cannot regress (``se = 0`` inside the margin), or has fewer than ``min_pairs`` pairs,
  is left out of the family;
* GO when ``ci_low ≥ −m``, NO-GO when ``p_regression_adjusted < a``, else INCONCLUSIVE;
* a judge score not calibrated in both runs (``uncalibrated_judge``, ``beameval.judges.trust``)
  is INCONCLUSIVE at best, its note naming the judge and its agreement, unless the policy
  sets ``require_calibrated_judges: false``.

A comparison is NO-GO if any score or gated group score is NO-GO, else GO when every gated
(overall) score is GO, else INCONCLUSIVE; a run that stopped early caps GO at INCONCLUSIVE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from beameval.compare.holm import holm
from beameval.compare.interval import paired_t_interval
from beameval.compare.paired import PairedSums
from beameval.compare.policy import GatePolicy
from beameval.compare.power import minimum_detectable_effect, rows_needed
from beameval.compare.significance import MCNEMAR, PAIRED_T, margin_tests, mcnemar_exact, paired_t_test
from beameval.compare.verdict import GO, INCONCLUSIVE, Verdict, overall_verdict, score_verdict

__all__ = ["ComparisonInput", "GateResult", "GroupInput", "ScoreInput", "gate_comparison", "gate_comparisons"]


@dataclass(frozen=True)
class ScoreInput:
    """One compared score: its paired sums, its known range (None when unknown) and its counts.

    ``uncalibrated_judge`` says why a judge score is not calibrated in both runs (None otherwise).
    """

    name: str
    sums: PairedSums
    value_range: tuple[float, float] | None = None
    unpaired_baseline: int = 0
    unpaired_candidate: int = 0
    nan_excluded: int = 0
    uncalibrated_judge: str | None = None


@dataclass(frozen=True)
class GroupInput:
    """The scores of one group (``by`` field = ``value``) and the rows paired in it."""

    by: str
    value: Any
    n_paired: int
    scores: Sequence[ScoreInput]


@dataclass(frozen=True)
class ComparisonInput:
    """What one baseline/candidate comparison brings to the gate.

    ``stopped`` names why a side did not run to completion (a budget), or is None.
    """

    scores: Sequence[ScoreInput]
    groups: Sequence[GroupInput] = ()
    stopped: str | None = None


@dataclass
class GateResult:
    """The JSON-ready score and group records, the verdict, and notes for the message.

    ``family_size``: how many p-values the multiplicity correction adjusted together (every
    comparison of one call shares the family): the number a user is told.
    """

    scores: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    verdict: Verdict
    confidence_level: float
    notes: list[str] = field(default_factory=list)
    family_size: int = 0


def gate_comparison(comparison: ComparisonInput, policy: GatePolicy, confidence_level: float) -> GateResult:
    """Gate one comparison (see the module docstring)."""
    return gate_comparisons([comparison], policy, confidence_level)[0]


def gate_comparisons(
    comparisons: Sequence[ComparisonInput], policy: GatePolicy, confidence_level: float
) -> list[GateResult]:
    """Gate several comparisons at once, with one Holm family across all of them (a multi-target run).

    Args:
        comparisons: one input per candidate.
        policy: margins, correction and minimum pair counts.
        confidence_level: the level of the intervals (``GatePolicy.confidence_level``).

    Returns:
        One result per comparison, in order.
    """
    level = (1.0 - confidence_level) / 2.0
    results = []
    family: list[dict[str, Any]] = []
    for comparison in comparisons:
        scores = [_record(score, policy, confidence_level, policy.min_pairs) for score in comparison.scores]
        groups = []
        for group in comparison.groups:
            gated_group = group.n_paired >= policy.min_group_pairs
            records = [_record(s, policy, confidence_level, policy.min_pairs, gated_group) for s in group.scores]
            groups.append({"by": group.by, "value": group.value, "n_paired": group.n_paired, "scores": records})
        for record in [*scores, *(r for g in groups for r in g["scores"])]:
            if record["gated"] and record["in_family"]:
                family.append(record)
        results.append(GateResult(scores, groups, GO, confidence_level))
    raw = [record["p_regression"] for record in family]
    adjusted = holm(raw) if policy.correction == "holm" else raw
    for record, p_value in zip(family, adjusted, strict=True):
        record["p_regression_adjusted"] = p_value
    for result in results:
        result.family_size = len(family)
    for comparison, result in zip(comparisons, results, strict=True):
        for record in [*result.scores, *(r for g in result.groups for r in g["scores"])]:
            _decide(record, level, confidence_level, policy.min_pairs)
            _distrust(record, policy)
        gated = [r["verdict"] for r in result.scores if r["gated"]]
        in_groups = [r["verdict"] for g in result.groups for r in g["scores"] if r["gated"]]
        result.verdict = overall_verdict(gated, in_groups)
        if comparison.stopped is not None and result.verdict == GO:
            result.verdict = INCONCLUSIVE
        if comparison.stopped is not None:
            result.notes.append(
                f"{comparison.stopped}: a run that stopped early is at best INCONCLUSIVE, since the rows it did not "
                "evaluate could change every score."
            )
    return results


def _record(
    score: ScoreInput, policy: GatePolicy, confidence_level: float, min_pairs: int, gated_group: bool = True
) -> dict[str, Any]:
    """The fields of one score that do not depend on the rest of the family."""
    part = score.sums
    n, sd = part.n, part.sd
    margin = policy.margin(score.name, score.value_range)
    interval = paired_t_interval(part.mean_d, sd, n, confidence_level)
    binary = part.binary and n > 0
    tests = margin_tests(part.mean_d, sd, n, margin or 0.0, binary, part.regressed, part.improved)
    gated = margin is not None and gated_group
    enough = n >= min_pairs
    return {
        "name": score.name,
        "n_paired": n,
        "unpaired_baseline": score.unpaired_baseline,
        "unpaired_candidate": score.unpaired_candidate,
        "nan_excluded": score.nan_excluded,
        "baseline_mean": part.sum_baseline / n if n else None,
        "candidate_mean": part.sum_candidate / n if n else None,
        "delta": part.mean_d if n else None,
        "delta_stderr": interval.stderr,
        "sd_delta": sd,
        "ci_low": interval.low,
        "ci_high": interval.high,
        "confidence_level": confidence_level,
        "range": None if score.value_range is None else list(score.value_range),
        "test": MCNEMAR if binary else PAIRED_T,  # the test behind p_value
        "p_value": mcnemar_exact(part.regressed, part.improved) if binary else paired_t_test(part.mean_d, sd, n),
        # the test behind p_noninferiority and p_regression: exact McNemar only at margin 0 (a shifted null is not
        # a statement about discordant pairs alone), so a 0/1 score with a margin is tested by paired t
        "margin_test": tests.test if margin is not None else None,
        "mde": minimum_detectable_effect(sd, n, 1.0 - confidence_level),
        "improved": part.improved,
        "regressed": part.regressed,
        "gated": gated,
        "margin": margin,
        "p_noninferiority": tests.p_noninferiority if margin is not None else None,
        "p_regression": tests.p_regression if margin is not None else None,
        "p_regression_adjusted": None,
        "in_family": gated and enough and tests.p_regression is not None and not tests.certain,
        "verdict": None,
        "rows_needed": None,
        "note": _note(margin, gated_group, enough, min_pairs, policy.min_group_pairs),
        "uncalibrated_judge": score.uncalibrated_judge,
    }


def _distrust(record: dict[str, Any], policy: GatePolicy) -> None:
    """Cap a GO of a judge score not calibrated in both runs at INCONCLUSIVE (NO-GO stays)."""
    reason = record["uncalibrated_judge"]
    if reason is None or not policy.require_calibrated_judges or record["verdict"] != GO:
        return
    record["verdict"] = INCONCLUSIVE
    record["note"] = (
        f"INCONCLUSIVE at best: {reason}; a judge gates only when it agrees with human labels "
        "(calibration: on the judge), or set require_calibrated_judges: false in the policy"
    )


def _note(margin: float | None, gated_group: bool, enough: bool, min_pairs: int, min_group_pairs: int) -> str | None:
    if margin is None:
        return "reported, not gated: its range is unknown and the policy does not name it"
    if not gated_group:
        return f"reported, not gated: the group has fewer than min_group_pairs ({min_group_pairs}) paired rows"
    if not enough:
        return f"INCONCLUSIVE: fewer than min_pairs ({min_pairs}) paired rows"
    return None


def _decide(record: dict[str, Any], level: float, confidence_level: float, min_pairs: int) -> None:
    """Set a gated record's verdict (and the rows needed when undecided); drop the internal family flag."""
    in_family = record.pop("in_family")
    if not record["gated"]:
        return
    margin = record["margin"]
    if record["note"] is not None:  # fewer than min_pairs: undecided whatever the interval says
        record["verdict"] = INCONCLUSIVE
    else:
        if not in_family:  # se = 0 inside the margin: p_regression is 1 and stays 1
            record["p_regression_adjusted"] = record["p_regression"]
        record["verdict"] = score_verdict(record["ci_low"], record["p_regression_adjusted"], level, margin)
    if record["verdict"] == INCONCLUSIVE and record["delta"] is not None:
        needed = rows_needed(record["sd_delta"], record["delta"] + margin, 1.0 - confidence_level)
        record["rows_needed"] = None if needed is None else max(needed, min_pairs)
