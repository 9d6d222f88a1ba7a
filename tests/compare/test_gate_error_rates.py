"""The gate's error rates by seeded simulation, through the real library (``gate_comparison``).

Each simulated comparison draws, per gated 0/1 score, the counts of pairs that went 1 → 0,
0 → 1 and stayed, from a multinomial with the scenario's true rates: those counts are the
sufficient statistics of the paired differences, so the gate sees exactly the ``PairedSums``
a Beam join of such rows would give it. Every comparison also carries ``ok_rate`` with no
failed row (se = 0: it is outside the Holm family and must not raise the others' adjustment).

Rates measured, for the revised gate and for the rule it replaced (NO-GO when the interval
lies below ``−max_drop`` and the Holm-adjusted two-sided p of "δ = 0" is below 0.05, GO when
``ci_low ≥ −max_drop``, ``max_drop: 0`` without a policy):

========================================================  =======  =====================
scenario (margin 0.01, n pairs)                             revised  old rule (no policy)
========================================================  =======  =====================
K = 5 scores, each true δ = −m, n = 1,000: false NO-GO      0.0225   0.112
one score, true δ = −m − 3 se, n = 1,000: NO-GO             0.875    0.875
rerun, 6% of rows flip each way, n = 3,000: GO              0.347    0.347 (0.033)
rerun, 1% of rows flip each way, n = 3,000: GO              0.962    0.962 (0.015)
rerun, 6% of rows flip each way, n = 20,000: GO             0.985    0.985 (0.028)
========================================================  =======  =====================

(The old rule's rates were measured with the same seeds and counts through the code this
replaced, gating each score at ``max_drop: 0.01``; in brackets, with no policy, where it
gated at ``max_drop: 0``.) With one score the two rules decide alike at these n; they part
where several scores are gated, and where no policy is given.

The K = 5 false NO-GO rate is held at a = 0.025 by Holm over ``p_regression``; the old rule
corrected a test of "no change" instead, which at large n is always significant, so the
uncorrected interval rule decided alone: 1 − 0.975⁵ ≈ 0.12 (without Holm the revised rule
gives the same, 0.112: the correction is what holds the rate). A same-model rerun with 6% of
rows flipping each way has sd(d) ≈ 0.35; at n = 3,000 the 95% interval's half-width (0.0124)
is wider than the 1% margin, so GO needs luck (≈ 35%, the normal approximation
P(Z ≥ 0.38)); GO in ≥ 95% takes about 3.6 se ≤ m, i.e. n ≈ 16,000 at that spread, or a
steadier model. Without a policy the old rule gated at max_drop 0, so a rerun was GO only when
it happened to improve (≈ 2.5%).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from beameval.compare.gate import ComparisonInput, ScoreInput, gate_comparison
from beameval.compare.paired import PairedSums
from beameval.compare.policy import OK_RATE, GatePolicy

MARGIN = 0.01


def _past_margin(n: int, discordant: float, standard_errors: float) -> tuple[float, float]:
    """(P(1 -> 0), P(0 -> 1)) with ``discordant`` pairs in all and true δ = −m − k·se (se at that δ)."""
    delta = -MARGIN
    for _ in range(20):  # se depends on δ through var(d) = discordant − δ²: a fixed point
        delta = -MARGIN - standard_errors * math.sqrt((discordant - delta**2) / n)
    return (discordant - delta) / 2, (discordant + delta) / 2


#: (name, sims, n, [(P(1 -> 0), P(0 -> 1)) per gated score], the verdict counted, seed)
SCENARIOS = {
    "k5_at_margin": (2000, 1000, [(0.06, 0.05)] * 5, "NO-GO", 11),
    "three_se_past": (600, 1000, [_past_margin(1000, 0.11, 3.0)], "NO-GO", 12),
    "rerun_6pct_3000": (600, 3000, [(0.06, 0.06)], "GO", 13),
    "rerun_1pct_3000": (600, 3000, [(0.01, 0.01)], "GO", 14),
    "rerun_6pct_20000": (600, 20000, [(0.06, 0.06)], "GO", 15),
}


def _sums(n: int, regressed: int, improved: int, ones: int) -> PairedSums:
    """The paired sums of n 0/1 pairs of which ``regressed`` went 1 -> 0 and ``improved`` 0 -> 1."""
    mean = (improved - regressed) / n
    return PairedSums(
        n=n,
        mean_d=mean,
        m2_d=(improved + regressed) - n * mean * mean,  # sum of (d - mean)^2 over d in {-1, 0, 1}
        sum_baseline=float(regressed + ones),
        sum_candidate=float(improved + ones),
        improved=improved,
        regressed=regressed,
        binary=True,
    )


def simulate(scenario: str, policy: GatePolicy | None = None) -> float:
    """The share of simulated comparisons whose overall verdict is the scenario's verdict."""
    sims, n, rates, verdict, seed = SCENARIOS[scenario]
    rng = np.random.default_rng(seed)
    counts = [rng.multinomial(n, [q_reg, q_imp, 1.0 - q_reg - q_imp], size=sims) for q_reg, q_imp in rates]
    ones = [rng.binomial(c[:, 2], 0.7) for c in counts]  # baseline 1s among unchanged rows (display only)
    ok = ScoreInput(OK_RATE, _sums(n, 0, 0, n), (0.0, 1.0))
    policy = policy or GatePolicy()
    hits = 0
    for j in range(sims):
        scores = [
            ScoreInput(f"s{k}", _sums(n, int(c[j, 0]), int(c[j, 1]), int(o[j])), (0.0, 1.0))
            for k, (c, o) in enumerate(zip(counts, ones, strict=True))
        ]
        hits += gate_comparison(ComparisonInput([*scores, ok]), policy, 0.95).verdict == verdict
    return hits / sims


def _mc_se(rate: float, sims: int) -> float:
    return math.sqrt(rate * (1.0 - rate) / sims)


def test_five_scores_at_the_margin_give_a_false_no_go_at_most_a() -> None:
    sims = SCENARIOS["k5_at_margin"][0]
    assert simulate("k5_at_margin") <= 0.025 + 3 * _mc_se(0.025, sims)


def test_without_holm_the_same_scores_would_exceed_a() -> None:
    # The correction is what holds the rate: with none, five tests at 0.025 reject about 1 - 0.975^5.
    rate = simulate("k5_at_margin", GatePolicy(correction="none"))
    assert rate == pytest.approx(1 - 0.975**5, abs=3 * _mc_se(0.12, SCENARIOS["k5_at_margin"][0]))


def test_one_score_three_standard_errors_past_the_margin_is_no_go_at_least_80_percent() -> None:
    _, n, [(q_reg, q_imp)], _, _ = SCENARIOS["three_se_past"]
    delta = q_imp - q_reg
    se = math.sqrt((q_reg + q_imp - delta**2) / n)
    assert delta == pytest.approx(-MARGIN - 3 * se, abs=1e-9)  # the scenario is what it says
    assert simulate("three_se_past") >= 0.80


def test_a_rerun_of_the_same_model_is_go_once_the_margin_exceeds_its_noise() -> None:
    assert simulate("rerun_1pct_3000") >= 0.95
    assert simulate("rerun_6pct_20000") >= 0.95


def test_a_noisy_rerun_on_too_few_rows_is_go_only_as_often_as_the_normal_approximation_says() -> None:
    sims, n, [(q_reg, q_imp)], _, _ = SCENARIOS["rerun_6pct_3000"]
    se = math.sqrt((q_reg + q_imp) / n)
    expected = float(stats.norm.sf((stats.norm.ppf(0.975) * se - MARGIN) / se))  # P(delta_hat - 1.96 se >= -m)
    assert simulate("rerun_6pct_3000") == pytest.approx(expected, abs=3 * _mc_se(expected, sims) + 0.02)
