"""Deciding a release early: an anytime-valid confidence sequence per gated score and the wave verdict.

A fixed-n interval (``beameval.compare.interval``) is valid at one sample size chosen in
advance; looking at it after every wave and stopping when it looks good makes a false GO far
more likely than its level says. A *confidence sequence* holds at every sample size at once
(P(the mean ever leaves the interval) ≤ β), so a run may look after every wave and stop at
the first decisive one.

The sequence is the predictable plug-in empirical-Bernstein confidence sequence of
Waudby-Smith & Ramdas (2024, JRSS-B, "Estimating means of bounded random variables by
betting", Theorem 2), two-sided at level β, truncation ``c = 1/2``, with its running
intersection, for the mean of ``x ∈ [0, 1]``:

* ``μ̂_t = (1/2 + Σ_{i≤t} x_i)/(t + 1)``, ``σ̂²_t = (1/4 + Σ_{i≤t} (x_i − μ̂_i)²)/(t + 1)``,
  with ``μ̂_0 = 1/2`` and ``σ̂²_0 = 1/4``;
* ``λ_t = min(√(2 log(2/β) / (σ̂²_{t−1} · t · log(1 + t))), c)``;
* ``v_t = 4 (x_t − μ̂_{t−1})²``, ``ψ(λ) = (−log(1 − λ) − λ)/4``;
* the interval at t: ``Σ λ_i x_i / Σ λ_i ± (log(2/β) + Σ v_i ψ(λ_i)) / Σ λ_i``, intersected
  with [0, 1] and with every earlier interval.

A paired difference ``d ∈ [−r, r]`` (r the score's range) maps to ``x = (d + r)/(2r)``, and
a bound b on the mean of x back to ``2r·b − r`` on δ.

The verdict after a wave (:func:`decide_wave`), with ``a = (1 − confidence_level)/2`` and K
the number of gated scores (the NO-GO family): **NO-GO** when some score's upper bound at
``β = 2a/K`` is below ``−m``; **GO** when every score that may decide GO has its lower bound
at ``β = 2a`` at or above ``−m``; otherwise go on. The upper bound at ``2a/K`` is wrong with
probability at most ``a/K`` for each score whatever the number of looks, so a false NO-GO
(some score within its margin declared beyond it) has probability at most ``a``; a false GO
needs the one score beyond its margin to pass a bound that is wrong with probability ``a``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beameval.compare.verdict import GO, INCONCLUSIVE, NO_GO, Verdict

__all__ = [
    "TRUNCATION",
    "SequentialScore",
    "WaveDecision",
    "decide_wave",
    "delta_bounds",
    "eb_confidence_sequence",
    "levels",
    "simulate_decisions",
    "verdict_codes",
]

#: The largest bet λ (the paper's truncation c).
TRUNCATION = 0.5


def eb_confidence_sequence(x: np.ndarray, beta: float, truncation: float = TRUNCATION) -> tuple[np.ndarray, np.ndarray]:
    """The confidence sequence of the module docstring for observations in [0, 1].

    Args:
        x: observations in [0, 1], in the order they were made; a 2-D array holds one
            sequence per row (the simulations run thousands at once).
        beta: the two-sided level (each side is wrong with probability at most β/2).
        truncation: the largest bet c.

    Returns:
        The lower and upper bounds after each observation (same shape as ``x``), running
        intersection taken.

    Raises:
        ValueError: an observation outside [0, 1], or β outside (0, 1).
    """
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    x = np.asarray(x, dtype=np.float64)
    if x.size and (np.nanmin(x) < 0.0 or np.nanmax(x) > 1.0 or np.isnan(x).any()):
        raise ValueError("observations of a confidence sequence must lie in [0, 1]")
    if x.shape[-1] == 0:
        return x.copy(), x.copy()
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mu = (0.5 + np.cumsum(x, axis=-1)) / (t + 1.0)
    var = (0.25 + np.cumsum((x - mu) ** 2, axis=-1)) / (t + 1.0)
    mu_prev = _shifted(mu, 0.5)
    var_prev = _shifted(var, 0.25)
    log_term = math.log(2.0 / beta)
    lam = np.minimum(np.sqrt(2.0 * log_term / (var_prev * t * np.log1p(t))), truncation)
    v = 4.0 * (x - mu_prev) ** 2
    psi = (-np.log1p(-lam) - lam) / 4.0
    lam_sum = np.cumsum(lam, axis=-1)
    centre = np.cumsum(lam * x, axis=-1) / lam_sum
    width = (log_term + np.cumsum(v * psi, axis=-1)) / lam_sum
    low = np.maximum.accumulate(np.clip(centre - width, 0.0, 1.0), axis=-1)
    high = np.minimum.accumulate(np.clip(centre + width, 0.0, 1.0), axis=-1)
    return low, high


def _shifted(values: np.ndarray, first: float) -> np.ndarray:
    """``values`` one step later along the last axis, ``first`` in front (the estimate before each observation)."""
    out = np.empty_like(values)
    out[..., 0] = first
    out[..., 1:] = values[..., :-1]
    return out


def delta_bounds(differences: np.ndarray, value_range: float, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on the mean paired difference δ after each pair: x = (d + r)/(2r), bounds back as 2r·b − r.

    Args:
        differences: candidate − baseline per pair, in [−r, r], in the evaluation order
            (a 2-D array: one sequence per row).
        value_range: r, the width of the score's range (1 for a [0, 1] score).
        beta: the two-sided level.

    Raises:
        ValueError: r is not positive, or a difference lies outside [−r, r].
    """
    if not value_range > 0.0:
        raise ValueError(f"a score's range must be positive, got {value_range}")
    d = np.asarray(differences, dtype=np.float64)
    # A difference a rounding error outside [−r, r] (r computed as max − min) is at the edge, not beyond it.
    x = (d + value_range) / (2.0 * value_range)
    tolerance = 1e-9
    if x.size and (np.nanmin(x) < -tolerance or np.nanmax(x) > 1.0 + tolerance):
        raise ValueError(f"a paired difference lies outside [-{value_range}, {value_range}], the score's range")
    low, high = eb_confidence_sequence(np.clip(x, 0.0, 1.0), beta)
    return 2.0 * value_range * low - value_range, 2.0 * value_range * high - value_range


@dataclass(frozen=True)
class SequentialScore:
    """One gated score's paired differences so far, in the evaluation order.

    ``for_go``: the score must pass for GO (an overall score); a group's score joins only
    the NO-GO family. ``min_pairs``: fewer pairs than this cannot decide yet.
    """

    name: str
    differences: np.ndarray
    margin: float
    value_range: float
    min_pairs: int = 10
    for_go: bool = True


@dataclass(frozen=True)
class WaveDecision:
    """The verdict after a wave (None: not decided yet) and each score's record for ``decision.waves``."""

    verdict: Verdict | None
    scores: list[dict[str, Any]]


def levels(confidence_level: float, family: int) -> tuple[float, float]:
    """The two-sided levels β of the GO bound (2a) and of the NO-GO bound (2a/K), K = ``family``."""
    a = (1.0 - confidence_level) / 2.0
    return 2.0 * a, 2.0 * a / max(family, 1)


def verdict_codes(
    go_low: np.ndarray, no_go_high: np.ndarray, margins: np.ndarray, enough: np.ndarray, for_go: np.ndarray
) -> np.ndarray:
    """The wave rule on arrays: 1 NO-GO, 0 GO, −1 not decided, for every look at once.

    Args:
        go_low: each score's lower bound on δ at the GO level, shape (K, ...).
        no_go_high: its upper bound at the NO-GO level, same shape.
        margins: m per score, shape (K,).
        enough: the score has at least ``min_pairs`` pairs, shape (K, ...).
        for_go: the score must pass for GO, shape (K,).

    Returns:
        The verdict codes, shape ``go_low.shape[1:]``.
    """
    shape = (-1,) + (1,) * (go_low.ndim - 1)
    m = np.asarray(margins, dtype=np.float64).reshape(shape)
    must = np.asarray(for_go, dtype=bool).reshape(shape)
    regressed = (enough & (no_go_high < -m)).any(axis=0)
    passed = (~must | (enough & (go_low >= -m))).all(axis=0) & must.any()
    return np.where(regressed, 1, np.where(passed, 0, -1))


def decide_wave(
    scores: Sequence[SequentialScore], confidence_level: float, last: bool = False, family: int | None = None
) -> WaveDecision:
    """The verdict after a wave (see the module docstring).

    Args:
        scores: every gated score (K = their number, groups' included).
        confidence_level: the gate's level; ``a = (1 − confidence_level)/2``.
        last: no row is left to evaluate: an undecided run is INCONCLUSIVE.
        family: K when the NO-GO family is larger than ``scores`` (a multi-target run decides
            each candidate apart, K counting every candidate's scores).

    Returns:
        The verdict (None to go on) and one record per score: ``name``, ``n``,
        ``mean_delta``, ``cs_low`` (the GO bound, at ``beta = 2a``), ``cs_high`` (the NO-GO
        bound, at ``beta_high = 2a/K``; the same level when K = 1), ``margin``.
    """
    beta_go, beta_no_go = levels(confidence_level, family or len(scores))
    lows, highs, records = [], [], []
    for score in scores:
        n = int(len(score.differences))
        low = high = math.nan
        if n:
            low = float(delta_bounds(score.differences, score.value_range, beta_go)[0][-1])
            high = float(delta_bounds(score.differences, score.value_range, beta_no_go)[1][-1])
        lows.append(low)
        highs.append(high)
        records.append(
            {
                "name": score.name,
                "n": n,
                "mean_delta": float(np.mean(score.differences)) if n else None,
                "cs_low": low if n else None,
                "cs_high": high if n else None,
                "beta": beta_go,
                "beta_high": beta_no_go,
                "margin": score.margin,
            }
        )
    enough = np.array([len(s.differences) >= max(s.min_pairs, 1) for s in scores], dtype=bool)
    code = verdict_codes(
        np.array(lows),
        np.array(highs),
        np.array([s.margin for s in scores]),
        enough,
        np.array([s.for_go for s in scores], dtype=bool),
    )
    verdict = {1: NO_GO, 0: GO}.get(int(code)) if scores else None
    if verdict is None and last:
        verdict = INCONCLUSIVE
    return WaveDecision(verdict, records)


def simulate_decisions(
    differences: Sequence[np.ndarray],
    margins: Sequence[float],
    value_ranges: Sequence[float],
    wave_rows: int,
    confidence_level: float,
    min_pairs: int = 10,
) -> tuple[np.ndarray, np.ndarray]:
    """Many runs of the wave rule at once (what :func:`decide_wave` does after each wave, on every run).

    Args:
        differences: per score, an array (runs, rows) of paired differences in evaluation order.
        margins: m per score.
        value_ranges: r per score.
        wave_rows: rows per wave; the rule looks after each wave and after the last row.
        confidence_level: the gate's level.
        min_pairs: pairs a score needs before it can decide.

    Returns:
        Per run, the verdict code (1 NO-GO, 0 GO, −1 INCONCLUSIVE) and the rows evaluated
        when it was reached.
    """
    rows = differences[0].shape[1]
    looks = np.unique(np.minimum(np.arange(wave_rows, rows + wave_rows, wave_rows), rows)) - 1
    beta_go, beta_no_go = levels(confidence_level, len(differences))
    lows = np.stack([delta_bounds(d, r, beta_go)[0][:, looks] for d, r in zip(differences, value_ranges, strict=True)])
    highs = np.stack(
        [delta_bounds(d, r, beta_no_go)[1][:, looks] for d, r in zip(differences, value_ranges, strict=True)]
    )
    enough = np.broadcast_to(looks + 1 >= min_pairs, lows.shape)
    codes = verdict_codes(lows, highs, np.asarray(margins), enough, np.ones(len(differences), dtype=bool))
    decided = codes >= 0
    first = np.where(decided.any(axis=1), decided.argmax(axis=1), len(looks) - 1)
    verdicts = np.where(decided.any(axis=1), codes[np.arange(codes.shape[0]), first], -1)
    return verdicts, looks[first] + 1
