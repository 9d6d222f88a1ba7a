"""rouge: ROUGE-1/2/3/L F-measures (Porter stemming) from Google's rouge-score package."""

from __future__ import annotations

from beameval.core.templates import Template
from beameval.metrics.base import Metric, MetricContext, register
from beameval.metrics.operands import Candidate, TextPairConfig, text_pair

__all__ = ["ROUGE_OUTPUTS", "Rouge", "RougeConfig"]

#: rouge-score type -> output name
ROUGE_OUTPUTS = {
    "rouge1": "rouge_1_score",
    "rouge2": "rouge_2_score",
    "rouge3": "rouge_3_score",
    "rougeL": "rouge_L_score",
}


class RougeConfig(TextPairConfig):
    """Config of ``type: rouge``: ``reference`` and optional ``candidate`` templates."""


@register("rouge")
class Rouge(Metric[RougeConfig]):
    """ROUGE F-measures of the candidate against the reference (docs/METRICS.md, `rouge`).

    The scorer (tokeniser and stemmer) is built once per metric instance, not per row.
    """

    config_class = RougeConfig
    value_range = (0.0, 1.0)

    def __init__(self, config: RougeConfig) -> None:
        super().__init__(config)
        self._reference = Template(config.reference, "reference")
        self._candidate = Candidate(config.candidate)
        from rouge_score.rouge_scorer import RougeScorer  # imports nltk (~0.4 s): only when used

        self._scorer = RougeScorer(list(ROUGE_OUTPUTS), use_stemmer=True)

    def output_names(self) -> list[str]:
        return list(ROUGE_OUTPUTS.values())

    def score(self, ctx: MetricContext) -> dict[str, float]:
        candidate, reference = text_pair(self, ctx, self._candidate, self._reference)
        scores = self._scorer.score(target=reference, prediction=candidate)
        return {name: float(scores[key].fmeasure) for key, name in ROUGE_OUTPUTS.items()}
