"""``word-overlap``: the share of the reference's distinct words that the answer contains.

An example of a metric of one's own: a config class, a ``Metric`` subclass, and an entry
point in ``pyproject.toml``. Nothing here is special to the evaluator's own metrics.
"""

from __future__ import annotations

import math

from beameval.metrics.api import CANDIDATE_DEFAULT, Metric, MetricConfig, MetricContext, MetricError, Template


class WordOverlapConfig(MetricConfig):
    """``{type: word-overlap, reference: TEMPLATE, candidate: TEMPLATE}``; candidate defaults to the model's answer."""

    reference: str
    candidate: str = CANDIDATE_DEFAULT


class WordOverlap(Metric[WordOverlapConfig]):
    """Distinct reference words found in the answer, over distinct reference words (NaN without reference words)."""

    config_class = WordOverlapConfig
    value_range = (0.0, 1.0)

    def __init__(self, config: WordOverlapConfig) -> None:
        super().__init__(config)
        self._reference = Template(config.reference, "reference")
        self._candidate = Template(config.candidate, "candidate")

    def output_names(self) -> list[str]:
        return ["overlap"]

    def score(self, ctx: MetricContext) -> dict[str, float]:
        reference = set(str(self._reference.render(ctx.template_context)).lower().split())
        candidate = self._candidate.render(ctx.template_context)
        if not isinstance(candidate, str):
            raise MetricError(f"word-overlap: the answer must be text, got {type(candidate).__name__}.")
        if not reference:
            return {"overlap": math.nan}
        return {"overlap": len(reference & set(candidate.lower().split())) / len(reference)}
