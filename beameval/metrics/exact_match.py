"""exact-match: 1 when the normalised candidate equals the normalised reference."""

from __future__ import annotations

from beameval.core.templates import Template
from beameval.metrics.base import Metric, MetricContext, register
from beameval.metrics.operands import Candidate, TextPairConfig, text_pair
from beameval.metrics.text import normalize_text


class ExactMatchConfig(TextPairConfig):
    """Config of ``type: exact-match``: ``reference`` and optional ``candidate`` templates."""


@register("exact-match")
class ExactMatch(Metric[ExactMatchConfig]):
    """Normalised string equality (docs/METRICS.md, `exact-match`)."""

    config_class = ExactMatchConfig
    value_range = (0.0, 1.0)

    def __init__(self, config: ExactMatchConfig) -> None:
        super().__init__(config)
        self._reference = Template(config.reference, "reference")
        self._candidate = Candidate(config.candidate)

    def output_names(self) -> list[str]:
        return ["exact-match"]

    def score(self, ctx: MetricContext) -> dict[str, float]:
        candidate, reference = text_pair(self, ctx, self._candidate, self._reference)
        return {"exact-match": float(normalize_text(candidate) == normalize_text(reference))}
