"""exact-match: 1 when the normalised candidate equals the normalised reference."""

from __future__ import annotations

from core.templates import Template, render_text
from metrics.base import Metric, MetricConfig, MetricContext, register
from metrics.text import normalize_text


class ExactMatchConfig(MetricConfig):
    """Config of ``type: exact-match``."""

    reference: str
    candidate: str | None = None


@register("exact-match")
class ExactMatch(Metric[ExactMatchConfig]):
    """Normalised string equality (REFERENCE_BEHAVIOUR.md 6.3)."""

    config_class = ExactMatchConfig

    def __init__(self, config: ExactMatchConfig) -> None:
        super().__init__(config)
        self._reference = Template(config.reference, "reference")
        self._candidate = self.candidate_template(config.candidate)

    def output_names(self) -> list[str]:
        return ["exact-match"]

    def score(self, ctx: MetricContext) -> dict[str, float]:
        candidate, reference = text_pair(self, ctx, self._candidate, self._reference)
        return {"exact-match": float(normalize_text(candidate) == normalize_text(reference))}


def text_pair(
    metric: Metric[MetricConfig], ctx: MetricContext, candidate: Template, reference: Template
) -> tuple[str, str]:
    """Render a (candidate, reference) pair of text templates for a row.

    Raises:
        MetricError: the candidate is the model output and the row has none.
        TemplateError: a template failed or rendered something other than text.
    """
    context = ctx.template_context
    if metric.config.candidate is None and not ctx.sample.get("output_text"):  # type: ignore[attr-defined]
        raise metric.missing_candidate(ctx)
    return render_text(candidate, context, "candidate"), render_text(reference, context, "reference")
