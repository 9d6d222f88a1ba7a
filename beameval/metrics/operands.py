"""Rendering of the text operands (candidate, reference) that several metrics share."""

from __future__ import annotations

from typing import Any

from beameval.core.templates import Template, render_text
from beameval.metrics.base import Metric, MetricConfig, MetricContext

__all__ = ["Candidate", "TextPairConfig", "text_pair"]


class TextPairConfig(MetricConfig):
    """Config fields of a metric comparing one candidate text with one reference text."""

    reference: str
    candidate: str | None = None


class Candidate:
    """The candidate operand: a template, or the model's output text when none is set.

    Args:
        source: the ``candidate`` template from the config; None means the sample's
            ``output_text``.

    """

    __slots__ = ("is_default", "template")

    def __init__(self, source: str | None) -> None:
        self.is_default = source is None
        self.template = Metric.candidate_template(source)

    def render(self, metric: Metric[Any], ctx: MetricContext) -> str:
        """Render the candidate text for a row.

        Raises:
            MetricError: the candidate is the model output and the row has none.
            TemplateError: the template failed or rendered something other than text.

        """
        if self.is_default and not ctx.sample.get("output_text"):
            raise metric.missing_candidate(ctx)
        return render_text(self.template, ctx.template_context, "candidate")


def text_pair(metric: Metric[Any], ctx: MetricContext, candidate: Candidate, reference: Template) -> tuple[str, str]:
    """Render a row's (candidate, reference) pair of texts; the candidate is checked first.

    Raises:
        MetricError: the candidate is the model output and the row has none.
        TemplateError: a template failed or rendered something other than text.

    """
    return candidate.render(metric, ctx), render_text(reference, ctx.template_context, "reference")
