"""compare_scores: every field of a score's record against an independent computation, Holm in the verdict, messages."""

import math

import numpy as np
import pytest
from scipy import stats

from beameval.compare.messages import verdict_message
from beameval.compare.paired import PairedSums
from beameval.compare.policy import GatePolicy
from beameval.compare.power import minimum_detectable_effect
from beameval.compare.scores import compare_scores


def _sums(base, cand) -> PairedSums:
    sums = PairedSums()
    for b, c in zip(base, cand, strict=True):
        sums.add(float(b), float(c))
    return sums


def _binary(n_same: int, regressed: int, improved: int) -> tuple[list[int], list[int]]:
    base = [1] * n_same + [1] * regressed + [0] * improved
    cand = [1] * n_same + [0] * regressed + [1] * improved
    return base, cand


def test_fields_of_a_continuous_score() -> None:
    rng = np.random.default_rng(4)
    base = rng.uniform(0, 1, 300)
    cand = np.clip(base + rng.normal(-0.05, 0.2, 300), 0, 1)
    records, verdict = compare_scores({"f1.f1": _sums(base, cand)}, GatePolicy(), 3, 5)
    (r,) = records
    d = cand - base
    test = stats.ttest_rel(cand, base)
    ci = test.confidence_interval(0.95)
    assert r["name"] == "f1.f1" and r["n_paired"] == 300
    assert (r["unpaired_baseline"], r["unpaired_candidate"]) == (3, 5)
    assert r["baseline_mean"] == pytest.approx(base.mean()) and r["candidate_mean"] == pytest.approx(cand.mean())
    assert r["delta"] == pytest.approx(d.mean())
    assert r["delta_stderr"] == pytest.approx(d.std(ddof=1) / math.sqrt(300))
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert r["confidence_level"] == pytest.approx(0.95)
    assert r["test"] == "paired-t" and r["p_value"] == pytest.approx(test.pvalue)
    assert r["mde"] == pytest.approx((stats.t.ppf(0.975, 299) + stats.t.ppf(0.8, 299)) * d.std(ddof=1) / math.sqrt(300))
    assert (r["improved"], r["regressed"]) == (int((d > 0).sum()), int((d < 0).sum()))
    assert r["verdict"] == verdict == "NO-GO"  # a drop of ~0.05 on 300 rows with sd 0.2: ci_high < 0


def test_binary_score_uses_mcnemar_and_is_go_when_no_worse() -> None:
    base, cand = _binary(180, 4, 16)
    records, verdict = compare_scores({"em": _sums(base, cand)}, GatePolicy(), 0, 0)
    (r,) = records
    tail = sum(math.comb(20, k) for k in range(5)) / 2**20
    assert r["test"] == "mcnemar-exact" and r["p_value"] == pytest.approx(2 * tail)
    assert r["ci_low"] > 0 and verdict == "GO" and r["rows_needed"] is None


def test_inconclusive_reports_the_rows_needed_to_decide() -> None:
    base, cand = _binary(90, 6, 4)
    records, verdict = compare_scores({"em": _sums(base, cand)}, GatePolicy(), 0, 0)
    (r,) = records
    assert verdict == "INCONCLUSIVE" and r["ci_low"] < 0 < r["ci_high"]
    needed = r["rows_needed"]
    # the rows needed are where the MDE at the observed spread reaches |delta + max_drop|
    assert minimum_detectable_effect(r["sd_delta"], needed, 0.05) <= abs(r["delta"])
    assert minimum_detectable_effect(r["sd_delta"], needed - 1, 0.05) > abs(r["delta"])
    message = verdict_message(
        {"verdict": verdict, "scores": records, "policy": {"alpha": 0.05}, "counts": _counts()}, "cmp/flips.jsonl"
    )
    assert message.startswith("INCONCLUSIVE: 1 of 1 gated scores") and f"about {needed:,} paired rows" in message


def test_holm_turns_a_marginal_no_go_into_inconclusive() -> None:
    # Two identical scores, each with raw p just under 0.05: Holm multiplies the smaller by 2.
    base, cand = _binary(400, 40, 22)
    sums = {"a": _sums(base, cand), "b": _sums(base, cand)}
    raw_records, raw_verdict = compare_scores(sums, GatePolicy(correction="none"), 0, 0)
    assert raw_records[0]["p_value"] < 0.05 and raw_records[0]["ci_high"] < 0 and raw_verdict == "NO-GO"
    records, verdict = compare_scores(sums, GatePolicy(), 0, 0)
    assert records[0]["p_value_adjusted"] == pytest.approx(min(1.0, 2 * records[0]["p_value"]))
    assert verdict == "INCONCLUSIVE"


def test_scores_the_policy_does_not_name_are_reported_not_gated() -> None:
    base, cand = _binary(50, 30, 0)
    policy = GatePolicy.model_validate({"scores": {"b": {"max_drop": 0.5}}})
    records, verdict = compare_scores({"a": _sums(base, cand), "b": _sums(base, cand)}, policy, 0, 0)
    assert records[0]["verdict"] is None and records[0]["gated"] is False
    assert records[1]["verdict"] == verdict == "GO"  # a drop of 0.375 is within max_drop 0.5


def test_no_go_message_names_scores_intervals_and_the_flips_file() -> None:
    base, cand = _binary(100, 40, 2)
    records, verdict = compare_scores({"exact-match.exact-match": _sums(base, cand)}, GatePolicy(), 0, 0)
    comparison = {"verdict": verdict, "scores": records, "policy": {"alpha": 0.05}, "counts": _counts(unpaired=2)}
    message = verdict_message(comparison, "cmp/flips.jsonl")
    r = records[0]
    assert message.startswith("NO-GO: 1 of 1 gated scores")
    assert "exact-match.exact-match" in message and f"{r['delta']:+.4g}" in message
    assert f"[{r['ci_low']:+.4g}, {r['ci_high']:+.4g}]" in message and "cmp/flips.jsonl" in message
    assert "2 baseline and 0 candidate rows had no partner" in message


def test_no_pairs_is_inconclusive() -> None:
    records, verdict = compare_scores({"a": PairedSums()}, GatePolicy(), 10, 0)
    assert verdict == "INCONCLUSIVE" and records[0]["delta"] is None and records[0]["p_value"] is None


def _counts(unpaired: int = 0) -> dict[str, int]:
    return {
        "paired": 100,
        "unpaired_baseline": unpaired,
        "unpaired_candidate": 0,
        "failed_baseline": 0,
        "failed_candidate": 0,
    }
