"""The revised gate: every field against scipy directly, the se = 0 rules, margins, Holm, groups, messages."""

import math

import numpy as np
import pytest
from scipy import stats

from beameval.compare.gate import ComparisonInput, GroupInput, ScoreInput, gate_comparison, gate_comparisons
from beameval.compare.messages import verdict_message
from beameval.compare.paired import PairedSums
from beameval.compare.policy import OK_RATE, GatePolicy
from beameval.compare.power import minimum_detectable_effect

UNIT = (0.0, 1.0)


def _sums(base, cand) -> PairedSums:
    return PairedSums.of_arrays(np.asarray(base, dtype=float), np.asarray(cand, dtype=float))


def _binary(n_same: int, regressed: int, improved: int) -> PairedSums:
    base = [1] * n_same + [1] * regressed + [0] * improved
    cand = [1] * n_same + [0] * regressed + [1] * improved
    return _sums(base, cand)


def _gate(scores, policy=None, groups=(), stopped=None, level=0.95):
    return gate_comparison(ComparisonInput(scores, groups, stopped), policy or GatePolicy(), level)


def _holm(p_values):
    """Holm by hand: sorted ascending, (m - i) * p_(i), running maximum, capped at 1."""
    order = np.argsort(p_values)
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def test_continuous_score_fields_match_scipy() -> None:
    rng = np.random.default_rng(4)
    base = rng.uniform(0, 1, 300)
    cand = np.clip(base + rng.normal(-0.02, 0.2, 300), 0, 1)
    result = _gate([ScoreInput("f1.f1", _sums(base, cand), UNIT, 3, 5)])
    r = result.scores[0]
    d = cand - base
    m = 0.01
    ci = stats.ttest_rel(cand, base).confidence_interval(0.95)
    assert r["margin"] == pytest.approx(m) and r["gated"] and r["test"] == "paired-t"
    assert (r["unpaired_baseline"], r["unpaired_candidate"], r["n_paired"]) == (3, 5, 300)
    assert r["delta"] == pytest.approx(d.mean()) and r["delta_stderr"] == pytest.approx(d.std(ddof=1) / math.sqrt(300))
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert r["p_value"] == pytest.approx(stats.ttest_rel(cand, base).pvalue)
    assert r["p_noninferiority"] == pytest.approx(stats.ttest_1samp(d, -m, alternative="greater").pvalue, rel=1e-9)
    assert r["p_regression"] == pytest.approx(stats.ttest_1samp(d, -m, alternative="less").pvalue, rel=1e-9)
    assert r["mde"] == pytest.approx((stats.t.ppf(0.975, 299) + stats.t.ppf(0.8, 299)) * d.std(ddof=1) / math.sqrt(300))
    # ok_rate is absent here; the one score is the family, so its adjusted p is its own
    assert r["p_regression_adjusted"] == pytest.approx(r["p_regression"])
    # GO by the interval and by p_noninferiority <= a agree
    assert (r["ci_low"] >= -m) == (r["p_noninferiority"] <= 0.025)


def test_binary_score_at_margin_zero_uses_the_one_sided_exact_binomial() -> None:
    policy = GatePolicy.model_validate({"scores": {"em": {"max_drop": 0.0}}})
    r = _gate([ScoreInput("em", _binary(180, 14, 4), UNIT)], policy).scores[0]
    assert r["test"] == "mcnemar-exact"
    assert r["p_regression"] == pytest.approx(stats.binomtest(14, 18, 0.5, alternative="greater").pvalue, rel=1e-12)
    assert r["p_value"] == pytest.approx(stats.binomtest(14, 18, 0.5).pvalue, rel=1e-12)  # two-sided, for information
    d = np.array([0] * 180 + [-1] * 14 + [1] * 4, dtype=float)
    assert r["p_noninferiority"] == pytest.approx(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue, rel=1e-9)
    assert r["verdict"] == "NO-GO"  # p = 0.0154 < 0.025 in a family of one


def test_holm_runs_over_every_gated_score_and_group_score() -> None:
    policy = GatePolicy(min_group_pairs=30)
    a, b = _binary(400, 40, 22), _binary(400, 30, 26)
    group = GroupInput("category", "arith", 120, [ScoreInput("a", _binary(100, 15, 5), UNIT)])
    small = GroupInput("category", "tiny", 12, [ScoreInput("a", _binary(8, 4, 0), UNIT)])
    result = _gate([ScoreInput("a", a, UNIT), ScoreInput("b", b, UNIT)], policy, [group, small])
    family = [result.scores[0], result.scores[1], result.groups[0]["scores"][0]]
    expected = _holm([r["p_regression"] for r in family])
    assert [r["p_regression_adjusted"] for r in family] == pytest.approx(expected)
    tiny = result.groups[1]["scores"][0]
    assert not tiny["gated"] and tiny["verdict"] is None and "min_group_pairs (30)" in tiny["note"]
    none = _gate([ScoreInput("a", a, UNIT), ScoreInput("b", b, UNIT)], GatePolicy(correction="none"), [group])
    assert [r["p_regression_adjusted"] for r in none.scores] == [r["p_regression"] for r in none.scores]


def test_a_collapsed_group_makes_no_go_under_a_fine_overall_score() -> None:
    overall = _binary(2900, 40, 60)  # overall delta +0.0067: GO on its own
    broken = GroupInput("category", "arith", 200, [ScoreInput("em", _binary(140, 55, 5), UNIT)])
    fine = GroupInput("category", "text", 2800, [ScoreInput("em", _binary(2760, 0, 40), UNIT)])
    result = _gate([ScoreInput("em", overall, UNIT)], groups=[broken, fine])
    assert result.scores[0]["verdict"] == "GO"
    assert result.groups[0]["scores"][0]["verdict"] == "NO-GO" and result.verdict == "NO-GO"
    message = verdict_message(_document(result), "cmp/flips.jsonl")
    assert 'category="arith": em' in message and message.startswith("NO-GO: 1 of 3 gated scores")


def test_groups_are_never_needed_for_go() -> None:
    overall = _binary(2900, 40, 60)
    undecided = GroupInput("category", "x", 40, [ScoreInput("em", _binary(36, 3, 1), UNIT)])
    result = _gate([ScoreInput("em", overall, UNIT)], groups=[undecided])
    assert result.groups[0]["scores"][0]["verdict"] == "INCONCLUSIVE" and result.verdict == "GO"


def test_a_run_compared_with_itself_is_go_and_ok_rate_without_failures_leaves_the_family() -> None:
    same = _sums([1, 0, 0.5, 1] * 25, [1, 0, 0.5, 1] * 25)
    ok = ScoreInput(OK_RATE, _binary(100, 0, 0), UNIT)
    result = _gate([ScoreInput("f1", same, UNIT), ok])
    assert result.verdict == "GO" and [r["verdict"] for r in result.scores] == ["GO", "GO"]
    for r in result.scores:
        assert (r["ci_low"], r["ci_high"], r["p_noninferiority"], r["p_regression"]) == (0.0, 0.0, 0.0, 1.0)
    # A certain score does not raise another's adjustment: with ok_rate beside it, a score keeps its raw p.
    other = _binary(400, 40, 22)
    alone = _gate([ScoreInput("em", other, UNIT)]).scores[0]
    beside = _gate([ScoreInput("em", other, UNIT), ok]).scores[0]
    assert beside["p_regression_adjusted"] == alone["p_regression_adjusted"] == pytest.approx(alone["p_regression"])


def test_every_pair_dropping_by_the_same_amount() -> None:
    drop = _sums([0.8] * 20, [0.5] * 20)  # se = 0, mean -0.3 < -m
    r = _gate([ScoreInput("f1", drop, UNIT)]).scores[0]
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(-0.3), pytest.approx(-0.3))
    assert (r["p_noninferiority"], r["p_regression"]) == (1.0, 0.0)
    assert r["verdict"] == "NO-GO"
    two = _gate([ScoreInput("f1", _sums([0.8, 0.8], [0.5, 0.5]), UNIT)]).scores[0]
    assert two["verdict"] == "INCONCLUSIVE" and "min_pairs (10)" in two["note"]  # two rows decide nothing


def test_a_same_mean_rerun_does_not_crash_and_reports_no_rows_needed() -> None:
    # A mean difference at the rounding level of floating point, against a real spread.
    sums = PairedSums(n=500, mean_d=1e-17, m2_d=0.09 * 499, sum_baseline=250.0, sum_candidate=250.0, binary=False)
    result = _gate([ScoreInput("f1", sums, UNIT)], GatePolicy.model_validate({"scores": {"f1": {"max_drop": 0}}}))
    r = result.scores[0]
    assert r["verdict"] == "INCONCLUSIVE" and r["rows_needed"] is None
    assert "no number of rows decides" in verdict_message(_document(result), "f")


def test_inconclusive_reports_the_rows_needed_for_the_margin_test() -> None:
    r = _gate([ScoreInput("em", _binary(90, 6, 4), UNIT)]).scores[0]
    assert r["verdict"] == "INCONCLUSIVE"
    needed, effect = r["rows_needed"], r["delta"] + r["margin"]
    # one-sided at a = 0.025 with 80% power: the two-sided-0.05 MDE formula, at |delta + m|
    assert minimum_detectable_effect(r["sd_delta"], needed, 0.05) <= abs(effect)
    assert minimum_detectable_effect(r["sd_delta"], needed - 1, 0.05) > abs(effect)


def test_default_margins_come_from_the_score_range() -> None:
    scores = [
        ScoreInput("bleu.sentence", _sums([50.0] * 20, [49.5] * 20), (0.0, 100.0)),
        ScoreInput("judge.quality", _sums([3.0] * 20, [3.0] * 20), (1.0, 5.0)),
        ScoreInput("remote.score", _sums([3.0] * 20, [1.0] * 20), None),
    ]
    result = _gate(scores)
    assert [r["margin"] for r in result.scores] == [1.0, pytest.approx(0.04), None]
    assert result.scores[0]["verdict"] == "GO"  # -0.5 BLEU is inside 1 point
    assert not result.scores[2]["gated"] and result.verdict == "GO"  # rangeless: reported, not gated
    named = GatePolicy.model_validate({"scores": {"remote.score": {"max_drop": 0.5}}})
    result = _gate(scores, named)
    assert [r["margin"] for r in result.scores] == [None, None, 0.5] and result.verdict == "NO-GO"
    fraction = GatePolicy.model_validate(
        {"scores": {"remote.score": {"max_drop": 5}}, "default_max_drop_fraction": 0.1}
    )
    assert [r["margin"] for r in _gate(scores, fraction).scores] == [10.0, pytest.approx(0.4), 5.0]


def test_alpha_sets_the_confidence_level() -> None:
    policy = GatePolicy(alpha=0.1)
    level = policy.confidence_level(0.95)
    assert level == pytest.approx(0.9) and GatePolicy().confidence_level(None) == 0.95
    r = _gate([ScoreInput("em", _binary(300, 10, 6), UNIT)], policy, level=level).scores[0]
    d = np.array([0] * 300 + [-1] * 10 + [1] * 6, dtype=float)
    ci = stats.ttest_1samp(d, 0).confidence_interval(0.9)
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(ci.low), pytest.approx(ci.high))


def test_too_few_pairs_is_inconclusive_and_no_pairs_too() -> None:
    r = _gate([ScoreInput("em", _binary(8, 0, 0), UNIT)]).scores[0]
    assert r["verdict"] == "INCONCLUSIVE" and r["ci_low"] == 0.0  # the point interval would pass, 8 < min_pairs
    result = _gate([ScoreInput("a", PairedSums(), UNIT)])
    assert result.verdict == "INCONCLUSIVE" and result.scores[0]["delta"] is None


def test_a_run_stopped_at_its_budget_is_at_best_inconclusive() -> None:
    fine = ScoreInput("em", _binary(300, 0, 0), UNIT)
    result = _gate([fine], stopped="the candidate run stopped at its budget")
    assert result.verdict == "INCONCLUSIVE" and "stopped at its budget" in result.notes[0]
    bad = ScoreInput("em", _binary(200, 100, 0), UNIT)
    assert _gate([bad], stopped="the candidate run stopped at its budget").verdict == "NO-GO"
    message = verdict_message(_document(result), "f")
    assert message.startswith("INCONCLUSIVE") and "stopped at its budget" in message


def test_several_candidates_share_one_holm_family() -> None:
    a = ComparisonInput([ScoreInput("em", _binary(400, 40, 22), UNIT)])
    b = ComparisonInput([ScoreInput("em", _binary(400, 30, 26), UNIT)])
    results = gate_comparisons([a, b], GatePolicy(), 0.95)
    raw = [results[0].scores[0]["p_regression"], results[1].scores[0]["p_regression"]]
    assert [r.scores[0]["p_regression_adjusted"] for r in results] == pytest.approx(_holm(raw))


def test_ok_rate_catches_failed_rows() -> None:
    # 19 of 40 rows failed in the candidate that the baseline answered; the others unchanged and right.
    ok = ScoreInput(OK_RATE, _binary(21, 19, 0), UNIT)
    result = _gate([ScoreInput("em", _binary(21, 0, 0), UNIT), ok])
    assert result.scores[0]["verdict"] == "GO" and result.scores[1]["verdict"] == "NO-GO"
    assert result.verdict == "NO-GO"


def _document(result):
    return {
        "verdict": result.verdict,
        "scores": result.scores,
        "groups": result.groups,
        "notes": result.notes,
        "policy": {"confidence_level": result.confidence_level},
        "counts": {
            "paired": 100,
            "unpaired_baseline": 0,
            "unpaired_candidate": 0,
            "failed_baseline": 0,
            "failed_candidate": 0,
        },
    }


def test_a_binary_score_with_a_margin_names_each_p_values_own_test() -> None:
    """p_value is exact McNemar for a 0/1 score; the margin tests are paired t once m > 0."""
    policy = GatePolicy.model_validate({"scores": {"em": {"max_drop": 0.02}}})
    r = _gate([ScoreInput("em", _binary(180, 14, 4), UNIT)], policy).scores[0]
    assert r["test"] == "mcnemar-exact" and r["margin_test"] == "paired-t"
    assert r["p_value"] == pytest.approx(stats.binomtest(14, 18, 0.5).pvalue, rel=1e-12)
    d = np.array([0] * 180 + [-1] * 14 + [1] * 4, dtype=float)
    assert r["p_regression"] == pytest.approx(stats.ttest_1samp(d, -0.02, alternative="less").pvalue, rel=1e-9)
