"""f1: SQuAD token F1 between the normalised candidate and reference (multiset overlap)."""

from __future__ import annotations

from collections import Counter

from beameval.core.templates import Template
from beameval.metrics.base import Metric, MetricContext, register
from beameval.metrics.operands import Candidate, TextPairConfig, text_pair
from beameval.metrics.text import normalize_text

__all__ = ["F1", "F1Config", "token_f1"]


class F1Config(TextPairConfig):
    """Config of ``type: f1``: ``reference`` and optional ``candidate`` templates."""


def token_f1(candidate: str, reference: str) -> float:
    """SQuAD token F1 of two texts after ``normalize_text``.

    Both sides empty after normalisation give 1.0, one side empty gives 0.0, and no
    common token gives 0.0; otherwise the harmonic mean of token precision and recall,
    counting common tokens as a multiset intersection.

    Args:
        candidate: the predicted text.
        reference: the expected text.

    Returns:
        The F1 score in [0, 1].

    """
    predicted = normalize_text(candidate).split()
    expected = normalize_text(reference).split()
    if not predicted or not expected:
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision = common / len(predicted)
    recall = common / len(expected)
    return 2 * precision * recall / (precision + recall)


@register("f1")
class F1(Metric[F1Config]):
    """Token-overlap F1 (docs/METRICS.md, `f1`)."""

    config_class = F1Config
    value_range = (0.0, 1.0)

    def __init__(self, config: F1Config) -> None:
        super().__init__(config)
        self._reference = Template(config.reference, "reference")
        self._candidate = Candidate(config.candidate)

    def output_names(self) -> list[str]:
        return ["f1"]

    def score(self, ctx: MetricContext) -> dict[str, float]:
        candidate, reference = text_pair(self, ctx, self._candidate, self._reference)
        return {"f1": token_f1(candidate, reference)}
