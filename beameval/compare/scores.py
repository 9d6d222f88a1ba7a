"""One comparison record per score (the ``scores`` fields of ``comparison.json``), and the overall verdict."""

from __future__ import annotations

from typing import Any

from beameval.compare.holm import holm
from beameval.compare.interval import paired_t_interval
from beameval.compare.paired import PairedSums
from beameval.compare.policy import GatePolicy
from beameval.compare.power import minimum_detectable_effect, rows_needed
from beameval.compare.significance import MCNEMAR, PAIRED_T, mcnemar_exact, paired_t_test
from beameval.compare.verdict import INCONCLUSIVE, Verdict, overall_verdict, score_verdict

__all__ = ["compare_scores"]


def compare_scores(
    sums: dict[str, PairedSums],
    policy: GatePolicy,
    unpaired_baseline: int,
    unpaired_candidate: int,
    nan_excluded: dict[str, int] | None = None,
) -> tuple[list[dict[str, Any]], Verdict]:
    """Every score's delta, interval, test, MDE and verdict, and the comparison's verdict.

    Args:
        sums: the paired sums of each compared score, in report order.
        policy: the gate policy (alpha, correction, gated scores).
        unpaired_baseline: keys only the baseline has.
        unpaired_candidate: keys only the candidate has.
        nan_excluded: per score, pairs left out because a side's value was NaN.

    Returns:
        ``(records, verdict)``: one JSON-ready record per score (``verdict`` None for a score
        the policy only reports), and NO-GO > INCONCLUSIVE > GO over the gated ones.
    """
    alpha = policy.alpha
    gates = policy.gates(list(sums))
    records = [_record(name, part, alpha, unpaired_baseline, unpaired_candidate) for name, part in sums.items()]
    gated = [record for record in records if record["name"] in gates]
    raw = [1.0 if record["p_value"] is None else record["p_value"] for record in gated]
    adjusted = holm(raw) if policy.correction == "holm" else raw
    for record, p_value in zip(gated, adjusted, strict=True):
        max_drop = gates[record["name"]]
        record["gated"] = True
        record["max_drop"] = max_drop
        record["p_value_adjusted"] = p_value if record["p_value"] is not None else None
        p_gate = record["p_value_adjusted"]
        record["verdict"] = score_verdict(record["ci_low"], record["ci_high"], p_gate, alpha, max_drop)
        if record["verdict"] == INCONCLUSIVE and record["delta"] is not None:
            record["rows_needed"] = rows_needed(record["sd_delta"], record["delta"] + max_drop, alpha)
    for record in records:
        record["nan_excluded"] = (nan_excluded or {}).get(record["name"], 0)
    return records, overall_verdict(record["verdict"] for record in gated)


def _record(
    name: str, part: PairedSums, alpha: float, unpaired_baseline: int, unpaired_candidate: int
) -> dict[str, Any]:
    n = part.n
    sd = part.sd
    delta = part.mean_d if n else None
    interval = paired_t_interval(part.mean_d, sd, n, 1.0 - alpha)
    binary = part.binary and n > 0
    p_value = mcnemar_exact(part.regressed, part.improved) if binary else paired_t_test(part.mean_d, sd, n)
    return {
        "name": name,
        "n_paired": n,
        "unpaired_baseline": unpaired_baseline,
        "unpaired_candidate": unpaired_candidate,
        "baseline_mean": part.sum_baseline / n if n else None,
        "candidate_mean": part.sum_candidate / n if n else None,
        "delta": delta,
        "delta_stderr": interval.stderr,
        "sd_delta": sd,
        "ci_low": interval.low,
        "ci_high": interval.high,
        "confidence_level": 1.0 - alpha,
        "test": MCNEMAR if binary else PAIRED_T,
        "p_value": p_value,
        "mde": minimum_detectable_effect(sd, n, alpha),
        "improved": part.improved,
        "regressed": part.regressed,
        "verdict": None,
        "gated": False,
        "max_drop": None,
        "p_value_adjusted": None,
        "rows_needed": None,
    }
