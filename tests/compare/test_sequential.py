"""The anytime-valid confidence sequence against an independent transcription, and the wave rule's error rates.

The reference below is a loop-by-loop transcription of the formula (Waudby-Smith & Ramdas
2024, Theorem 2: predictable plug-in empirical Bernstein, two-sided, c = 1/2, running
intersection) in plain Python floats, written apart from the product's vectorised numpy.

The simulations run the product's own rule (``simulate_decisions``, which applies
``verdict_codes`` as ``decide_wave`` does) with a look after every wave, on seeded
sequences whose true mean difference is exactly at the margin (δ = −m): there a GO is false
(the candidate is not within the margin) and so is a NO-GO (it is not beyond it). Rates
measured (10,000 sequences each, 1,000 rows, waves of 100, m = 0.05, a = 0.025):

=====================================================  ========  ===========
scenario at δ = −m                                      false GO  false NO-GO
=====================================================  ========  ===========
two-point d ∈ {−1, 0} (a binary score that only drops)  0.0019    0.0000
two-point d ∈ {−1, +1} (every row flips)                0.0040    0.0054
three-point, 10% discordant                             0.0015    0.0007
three-point, 40% discordant                             0.0033    0.0034
K = 3 scores at δ = −m, 20% discordant (NO-GO family)   0.0000    0.0009
=====================================================  ========  ===========

Clear cases (same draws): δ = 0 with 4% discordant is GO in 99.97% after 404 rows on
average; δ = −4m is NO-GO in 100% after 183 rows on average.

(The bound is conservative: the guarantee holds over infinitely many looks, and a run of
1,000 rows uses few of them; the rates are printed by ``-s``.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from beameval.compare.sequential import (
    SequentialScore,
    decide_wave,
    delta_bounds,
    eb_confidence_sequence,
    simulate_decisions,
)

A = 0.025
LEVEL = 1 - 2 * A
MARGIN = 0.05


def _reference_cs(xs: list[float], beta: float, c: float = 0.5) -> tuple[list[float], list[float]]:
    """The contract's formula, one observation at a time, in plain floats."""
    lows, highs = [], []
    mu_prev, var_prev = 0.5, 0.25
    sum_x, sum_sq = 0.0, 0.0
    sum_lam, sum_lam_x, sum_v_psi = 0.0, 0.0, 0.0
    low_run, high_run = 0.0, 1.0
    for i, x in enumerate(xs):
        t = i + 1
        lam = min(math.sqrt(2 * math.log(2 / beta) / (var_prev * t * math.log(1 + t))), c)
        v = 4 * (x - mu_prev) ** 2
        psi = (-math.log(1 - lam) - lam) / 4
        sum_lam += lam
        sum_lam_x += lam * x
        sum_v_psi += v * psi
        centre = sum_lam_x / sum_lam
        width = (math.log(2 / beta) + sum_v_psi) / sum_lam
        low_run = max(low_run, max(centre - width, 0.0))
        high_run = min(high_run, min(centre + width, 1.0))
        lows.append(low_run)
        highs.append(high_run)
        sum_x += x
        mu_t = (0.5 + sum_x) / (t + 1)
        sum_sq += (x - mu_t) ** 2
        mu_prev, var_prev = mu_t, (0.25 + sum_sq) / (t + 1)
    return lows, highs


_SEQUENCES = {
    "random": np.random.default_rng(1).random(500).tolist(),
    "random binary": np.random.default_rng(2).integers(0, 2, 400).astype(float).tolist(),
    "all 0": [0.0] * 300,
    "all 1": [1.0] * 300,
    "alternating": [float(i % 2) for i in range(300)],
    "long run of failures": [1.0] * 150 + [0.0] * 100 + [1.0] * 50,
    "three-point": (np.random.default_rng(3).integers(0, 3, 300) / 2).tolist(),
    "one": [0.3],
}


@pytest.mark.parametrize("name", sorted(_SEQUENCES))
@pytest.mark.parametrize("beta", [0.05, 0.05 / 7, 0.5])
def test_confidence_sequence_matches_the_formula(name: str, beta: float) -> None:
    xs = _SEQUENCES[name]
    low, high = eb_confidence_sequence(np.array(xs), beta)
    ref_low, ref_high = _reference_cs(xs, beta)
    np.testing.assert_allclose(low, ref_low, rtol=0, atol=1e-12)
    np.testing.assert_allclose(high, ref_high, rtol=0, atol=1e-12)
    assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) <= 0)  # the running intersection


def test_rows_of_a_2d_array_are_independent_sequences() -> None:
    xs = np.random.default_rng(4).random((3, 50))
    low, high = eb_confidence_sequence(xs, 0.05)
    for row in range(3):
        ref_low, ref_high = _reference_cs(xs[row].tolist(), 0.05)
        np.testing.assert_allclose(low[row], ref_low, atol=1e-12)
        np.testing.assert_allclose(high[row], ref_high, atol=1e-12)


def test_differences_map_to_the_unit_interval_and_back() -> None:
    d = np.array([0.0, -20.0, 50.0, -100.0, 100.0, 10.0])  # a [0, 100] score such as BLEU: r = 100
    low, high = delta_bounds(d, 100.0, 0.05)
    ref_low, ref_high = _reference_cs(((d + 100) / 200).tolist(), 0.05)
    np.testing.assert_allclose(low, 200 * np.array(ref_low) - 100, atol=1e-10)
    np.testing.assert_allclose(high, 200 * np.array(ref_high) - 100, atol=1e-10)
    with pytest.raises(ValueError, match="outside"):
        delta_bounds(np.array([1.5]), 1.0, 0.05)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        eb_confidence_sequence(np.array([0.5, np.nan]), 0.05)


def _score(name: str, d: np.ndarray, margin: float = MARGIN, **kw: object) -> SequentialScore:
    return SequentialScore(name, d, margin, 1.0, **kw)  # type: ignore[arg-type]


def test_wave_rule_go_no_go_and_min_pairs() -> None:
    same = np.zeros(400)
    worse = -np.ones(400) * (np.arange(400) % 2)  # every other row lost: δ = −0.5
    assert decide_wave([_score("em", same), _score("ok_rate", same)], LEVEL).verdict == "GO"
    assert decide_wave([_score("em", same), _score("f1", worse)], LEVEL).verdict == "NO-GO"
    # fewer than min_pairs pairs decide nothing, and the last wave makes that INCONCLUSIVE
    assert decide_wave([_score("em", same[:5])], LEVEL).verdict is None
    assert decide_wave([_score("em", same[:5])], LEVEL, last=True).verdict == "INCONCLUSIVE"
    # a group's score can make it NO-GO but is never needed for GO
    group = _score("em[cat=a]", same[:3], for_go=False)
    assert decide_wave([_score("em", same), group], LEVEL).verdict == "GO"
    record = decide_wave([_score("em", same), _score("f1", same)], LEVEL).scores[0]
    assert record["beta"] == pytest.approx(2 * A) and record["beta_high"] == pytest.approx(A)  # K = 2
    assert record["n"] == 400 and record["mean_delta"] == 0.0
    assert record["cs_low"] >= -MARGIN


def test_wave_records_are_the_bounds_at_their_levels() -> None:
    d = np.random.default_rng(5).choice([-1.0, 0.0, 1.0], size=250, p=[0.1, 0.82, 0.08])
    record = decide_wave([_score("em", d), _score("f1", d), _score("ok", d)], LEVEL).scores[0]
    ref_low, _ = _reference_cs(((d + 1) / 2).tolist(), 2 * A)
    _, ref_high = _reference_cs(((d + 1) / 2).tolist(), 2 * A / 3)
    assert record["cs_low"] == pytest.approx(2 * ref_low[-1] - 1, abs=1e-12)
    assert record["cs_high"] == pytest.approx(2 * ref_high[-1] - 1, abs=1e-12)


RUNS = 10_000
ROWS = 1_000
WAVE = 100
CHUNK = 2_500


def _draw(rng: np.random.Generator, values: list[float], probs: list[float]) -> np.ndarray:
    return rng.choice(np.array(values), size=(CHUNK, ROWS), p=probs)


def _rates(draw, scores: int = 1, margin: float = MARGIN) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """(GO rate, NO-GO rate, mean rows evaluated) over RUNS sequences, looking after every wave."""
    rng = np.random.default_rng(20261207)
    verdicts, used = [], []
    for _ in range(RUNS // CHUNK):
        diffs = [draw(rng) for _ in range(scores)]
        v, n = simulate_decisions(diffs, [margin] * scores, [1.0] * scores, WAVE, LEVEL)
        verdicts.append(v)
        used.append(n)
    codes, rows = np.concatenate(verdicts), np.concatenate(used)
    return float((codes == 0).mean()), float((codes == 1).mean()), float(rows.mean())


#: a plus three standard errors of a rate a over RUNS sequences.
BOUND = A + 3 * math.sqrt(A * (1 - A) / RUNS)


_AT_MARGIN = {  # each with mean exactly −m
    "two-point {-1, 0}": ([-1.0, 0.0], [MARGIN, 1 - MARGIN]),
    "two-point {-1, +1}": ([-1.0, 1.0], [(1 + MARGIN) / 2, (1 - MARGIN) / 2]),
    "three-point 10%": ([-1.0, 0.0, 1.0], [(0.10 + MARGIN) / 2, 0.90, (0.10 - MARGIN) / 2]),
    "three-point 40%": ([-1.0, 0.0, 1.0], [(0.40 + MARGIN) / 2, 0.60, (0.40 - MARGIN) / 2]),
}


@pytest.mark.parametrize("name", sorted(_AT_MARGIN))
def test_error_rates_at_the_margin_with_a_look_after_every_wave(name: str) -> None:
    values, probs = _AT_MARGIN[name]
    go, no_go, rows = _rates(lambda rng: _draw(rng, values, probs))
    print(f"{name}: false GO {go:.4f}, false NO-GO {no_go:.4f}, mean rows {rows:.0f} of {ROWS}")
    assert go <= BOUND
    assert no_go <= BOUND


def test_false_no_go_with_several_scores_at_the_margin() -> None:
    values, probs = [-1.0, 0.0, 1.0], [(0.2 + MARGIN) / 2, 0.8, (0.2 - MARGIN) / 2]
    go, no_go, _ = _rates(lambda rng: _draw(rng, values, probs), scores=3)
    print(f"K = 3 at the margin: false NO-GO {no_go:.4f} (GO {go:.4f})")
    assert no_go <= BOUND


def test_clear_cases_decide_well_before_the_end() -> None:
    same = ([-1.0, 0.0, 1.0], [0.02, 0.96, 0.02])  # δ = 0, a steady rerun
    go, no_go, rows = _rates(lambda rng: _draw(rng, *same))
    print(f"δ = 0: GO {go:.4f}, NO-GO {no_go:.4f}, mean rows {rows:.0f}")
    assert go > 0.99 and no_go == 0.0 and rows <= 0.5 * ROWS
    broken = ([-1.0, 0.0, 1.0], [0.2, 0.8, 0.0])  # δ = −0.2 = −4m
    go, no_go, rows = _rates(lambda rng: _draw(rng, *broken))
    print(f"δ = -4m: GO {go:.4f}, NO-GO {no_go:.4f}, mean rows {rows:.0f}")
    assert no_go > 0.99 and go == 0.0 and rows <= 0.3 * ROWS
