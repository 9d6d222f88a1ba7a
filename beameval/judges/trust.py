"""Which judge scores a comparison may not gate on: those not calibrated in both runs.

A judge that disagrees with people turns a release gate into noise with a p-value, so a
judge score is trusted only when both runs report it ``calibrated`` in ``judge_agreement``.
The judges are found in each run's recorded config (``type: llm-judge``, their score names
keyed as the run keyed them, a pairwise judge's ``preference`` included); a judge without
``calibration:`` is not calibrated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from beameval.core.scoring import metric_keys
from beameval.judges.calibration import MIN_LABELLED
from beameval.metrics.judge.pairwise import PREFERENCE

__all__ = ["judge_score_names", "uncalibrated_judges"]


@dataclass(frozen=True)
class _Recorded:
    type: str
    name: str | None


def judge_score_names(results: Mapping[str, Any]) -> list[str]:
    """Every ``llm-judge`` score of a run, as ``<metric key>.<score>``, from its recorded config."""
    metrics = [m for m in ((results.get("config") or {}).get("metrics") or []) if isinstance(m, Mapping)]
    keys = metric_keys([_Recorded(str(m.get("type")), m.get("name")) for m in metrics])
    return [
        f"{key}.{name}"
        for key, metric in zip(keys, metrics, strict=True)
        if metric.get("type") == "llm-judge"
        for name in _judged(metric)
    ]


def _judged(metric: Mapping[str, Any]) -> list[str]:
    """A judge's score names: its ``scores``, or a pairwise judge's ``preference``."""
    if metric.get("pairwise"):
        return [PREFERENCE]
    return [score["name"] for score in metric.get("scores") or [] if isinstance(score, Mapping) and "name" in score]


def _why(side: str, record: Mapping[str, Any] | None) -> str | None:
    """Why a judge score is not calibrated on one side, or None when it is."""
    if record is None:
        return f"has no calibration (human labels) in the {side} run"
    if record.get("calibrated"):
        return None
    statistic = record.get("statistic", "kappa")
    value = record.get(statistic)
    shown = "undefined" if value is None else f"{value:.3g}"
    n = record.get("n") or 0
    short = f", fewer than the {MIN_LABELLED} needed" if n < MIN_LABELLED else ""
    return (
        f"is not calibrated in the {side} run ({statistic} {shown}, min_agreement {record.get('min_agreement')}, "
        f"on {n} labelled rows{short})"
    )


def uncalibrated_judges(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, str]:
    """Judge score name -> why it is not calibrated on both sides (a phrase naming the judge and its agreement)."""
    found = {}
    agreements = [
        {record["score"]: record for record in results.get("judge_agreement") or []}
        for results in (baseline, candidate)
    ]
    for name in dict.fromkeys([*judge_score_names(baseline), *judge_score_names(candidate)]):
        reasons = [
            reason
            for side, records in zip(("baseline", "candidate"), agreements, strict=True)
            if (reason := _why(side, records.get(name))) is not None
        ]
        if reasons:
            found[name] = f"the judge score {name} " + " and ".join(reasons)
    return found
