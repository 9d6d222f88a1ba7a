"""Pairwise judging with position swaps: which of two answers is better, asked in both orders.

A judge that prefers whatever it is shown first (position bias) would otherwise decide a
comparison by the order of the prompt. ``llm-judge`` with ``pairwise: true`` asks twice per
row: once with the row's answer as answer A and the baseline's (the first target's) as
answer B, once swapped. Each reply is ``{"preference": "A" | "B" | "tie"}``, read as the
candidate's ``win``, ``tie`` or ``loss``; the row's verdict counts only when both orders
agree, else it is a tie and the row's ``position_flip`` is 1. A row whose two answers are
identical is a tie without asking (the first target, judged against itself, sends nothing).

Per row: ``preference`` (1 win, 0.5 tie, 0 loss for the candidate; aggregated as a rubric,
so its label counts are the win/tie/loss counts), ``preference.label`` and
``position_flip`` (NaN when the judge was not asked). ``results.json`` reports each
pairwise judge's counts and ``position_flip_rate`` (:func:`pairwise_results`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from beameval.metrics.base import EndpointMetric, MetricConfig, MetricContext
from beameval.metrics.judge.scores import RubricLevel, RubricScore

if TYPE_CHECKING:
    from beameval.config.access import EndpointAccess
    from beameval.inference.prepared import PreparedRequest
    from beameval.inference.targets.base import TargetHandler
    from beameval.metrics.base import EndpointSettings

__all__ = [
    "FLIP",
    "PREFERENCE",
    "PREFERENCE_SCORE",
    "SWAPPED",
    "Answers",
    "SwappedOrder",
    "answers",
    "pairwise_instructions",
    "pairwise_results",
    "pairwise_subject",
    "verdict",
]

PREFERENCE = "preference"
FLIP = "position_flip"
SWAPPED = "swapped"  # the swapped order's call key: ``<metric key>.swapped`` (no metric key has a dot)

#: What the judge answers, read with the judge's usual parsing (JSON, fenced or in prose).
PREFERENCE_SCORE = RubricScore(
    name=PREFERENCE,
    rubric=[
        RubricLevel(label="A", value=0, description="answer A is better"),
        RubricLevel(label="B", value=1, description="answer B is better"),
        RubricLevel(label="tie", value=2, description="neither is better"),
    ],
)
#: The candidate's outcome as a score: the rubric levels of the ``preference`` output.
OUTCOMES: tuple[tuple[str, float, str], ...] = (
    ("loss", 0.0, "the baseline's answer is better in both orders"),
    ("tie", 0.5, "a tie, identical answers, or the two orders disagree"),
    ("win", 1.0, "the row's answer is better in both orders"),
)
_VALUES = {label: value for label, value, _ in OUTCOMES}
#: The judge's answer -> the candidate's outcome, when the candidate is shown first / second.
_AS_SHOWN = ({"A": "win", "B": "loss", "tie": "tie"}, {"A": "loss", "B": "win", "tie": "tie"})


def pairwise_instructions() -> str:
    """The default system text: compare two answers, ignore their order, answer in JSON."""
    return (
        "You are an expert evaluator. You are given two answers to the same request, answer A and answer B. "
        "Decide which answer is better. The order in which they are shown says nothing about their quality.\n\n"
        'Answer with a single JSON object and nothing else: {"preference": "A"} when answer A is better, '
        '{"preference": "B"} when answer B is better, {"preference": "tie"} when neither is better.'
    )


def pairwise_subject(answer_a: str, answer_b: str) -> str:
    """The default user text: both answers, each between markers."""
    return (
        f"[The start of answer A]\n{answer_a}\n[The end of answer A]\n\n"
        f"[The start of answer B]\n{answer_b}\n[The end of answer B]"
    )


class Answers:
    """A row's two answers: the candidate's (the row's sample) and the baseline's (the first target's)."""

    __slots__ = ("baseline", "candidate")

    def __init__(self, candidate: str, baseline: str | None) -> None:
        self.candidate = candidate
        self.baseline = baseline

    def shown(self, swapped: bool) -> tuple[str, str]:
        """``(answer A, answer B)``: the candidate first, or (swapped) the baseline first."""
        baseline = self.baseline or ""  # none only where nothing is sent (the preflight's render check)
        return (baseline, self.candidate) if swapped else (self.candidate, baseline)

    @property
    def identical(self) -> bool:
        """Both answers are the same text: a tie, nothing to ask."""
        return self.baseline == self.candidate


def answers(ctx: MetricContext) -> Answers:
    """The row's answers; ``baseline`` None when the first target has none for the row."""
    candidate = ctx.sample.get("output_text")
    baseline = (ctx.baseline or {}).get("output_text")
    return Answers(candidate if isinstance(candidate, str) else "", baseline if isinstance(baseline, str) else None)


def verdict(first: str, second: str) -> tuple[str, float]:
    """The row's outcome for the candidate and its position flip, from the judge's label in each order.

    ``first`` answers the order with the candidate as A, ``second`` the swapped one. The
    outcome counts only when both orders give it; otherwise the row is a tie and flipped.
    """
    shown_first, shown_second = _AS_SHOWN[0][first], _AS_SHOWN[1][second]
    if shown_first == shown_second:
        return shown_first, 0.0
    return "tie", 1.0


def outcome_value(label: str) -> float:
    """The ``preference`` value of an outcome label (1 win, 0.5 tie, 0 loss)."""
    return _VALUES[label]


class SwappedOrder(EndpointMetric[MetricConfig]):
    """The pairwise judge's second call of a row (the baseline's answer shown as A), under ``<key>.swapped``.

    It sends through its judge's handler, engine, journal, store and batches like any
    endpoint call (``EndpointMetric.endpoint_calls``); the judge reads its reply when scoring.
    """

    config_class = MetricConfig

    def __init__(self, judge: Any) -> None:
        super().__init__(judge.config)
        self._judge = judge
        self.key = f"{judge.key}.{SWAPPED}"

    def output_names(self) -> list[str]:
        return []

    def score(self, ctx: MetricContext) -> Mapping[str, float | str]:
        return {}

    def endpoint_handler(self) -> TargetHandler:
        return self._judge.endpoint_handler()  # type: ignore[no-any-return]

    @property
    def endpoint_access(self) -> EndpointAccess:
        return self._judge.endpoint_access  # type: ignore[no-any-return]

    @property
    def endpoint_settings(self) -> EndpointSettings:
        return self._judge.endpoint_settings  # type: ignore[no-any-return]

    def needs_call(self, ctx: MetricContext) -> bool:
        return self._judge.needs_call(ctx)  # type: ignore[no-any-return]

    def build_request(self, ctx: MetricContext) -> PreparedRequest:
        return self._judge.pair_request(ctx, swapped=True)  # type: ignore[no-any-return]


def pairwise_results(metrics: Sequence[tuple[str, Any]], summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``results.json``'s ``pairwise``: per pairwise judge, the win/tie/loss counts and the position flip rate.

    Args:
        metrics: the run's ``(key, metric)`` pairs; those with ``config.pairwise`` count.
        summary: the run summary (``scores`` by name, ``labels`` counts by label output).
    """
    records = []
    for key, metric in metrics:
        if not getattr(metric.config, "pairwise", False):
            continue
        counts = (summary.get("labels") or {}).get(f"{key}.{PREFERENCE}.label") or {}
        flips = (summary.get("scores") or {}).get(f"{key}.{FLIP}") or {}
        judged = int(flips.get("count") or 0)
        flipped = _finite(flips.get("sum")) if judged else None  # the flips are 0/1: their sum is exact
        records.append(
            {
                "score": f"{key}.{PREFERENCE}",
                "wins": int(counts.get("win", 0)),
                "ties": int(counts.get("tie", 0)),
                "losses": int(counts.get("loss", 0)),
                "judged": judged,
                "position_flips": 0 if flipped is None else round(flipped),
                "position_flip_rate": None if flipped is None else flipped / judged,
            }
        )
    return records


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
