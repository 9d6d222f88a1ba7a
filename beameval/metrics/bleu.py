"""bleu: sacrebleu sentence BLEU per row, plus corpus BLEU from summed n-gram statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from beameval.core.errors import MetricError
from beameval.core.templates import Template, render_text
from beameval.metrics.base import Metric, MetricConfig, MetricContext, register
from beameval.metrics.operands import Candidate

if TYPE_CHECKING:
    from sacrebleu.metrics.bleu import BLEUScore

__all__ = ["MAX_NGRAM_ORDER", "Bleu", "BleuConfig"]

MAX_NGRAM_ORDER = 4
#: corpus statistics per row: [hypothesis length, reference length, matches 1..4, totals 1..4]
_STATS_LENGTH = 2 + 2 * MAX_NGRAM_ORDER


class BleuConfig(MetricConfig):
    """Config of ``type: bleu``: ``references`` (one template per reference), ``candidate``."""

    references: list[str] = Field(min_length=1)
    candidate: str | None = None


@register("bleu")
class Bleu(Metric[BleuConfig]):
    """Sentence and corpus BLEU with sacrebleu's defaults (docs/METRICS.md, `bleu`).

    The row score equals ``sacrebleu.sentence_bleu(candidate, references).score``. The
    corpus score equals ``sacrebleu.corpus_bleu(candidates, [first_references]).score``:
    like the reference SDK, only each row's **first** reference counts at corpus level.
    """

    config_class = BleuConfig
    value_range = (0.0, 100.0)

    def __init__(self, config: BleuConfig) -> None:
        super().__init__(config)
        self._candidate = Candidate(config.candidate)
        self._references = [Template(source, f"references[{index}]") for index, source in enumerate(config.references)]
        from sacrebleu.metrics.bleu import BLEU  # imported only when a run uses BLEU

        # What sacrebleu.sentence_bleu builds on every call, built once (13a, exp smoothing).
        self._sentence = BLEU(effective_order=True)
        # The last row's statistics: with one reference, corpus_stats needs exactly what score computed.
        self._last: tuple[str, list[str], BLEUScore] | None = None

    def output_names(self) -> list[str]:
        return ["sentence"]

    def score(self, ctx: MetricContext) -> dict[str, float]:
        candidate = self._candidate.render(self, ctx)
        references = self._render_references(ctx, self._references)
        return {"sentence": self._sentence_score(candidate, references).score}

    def corpus_output_names(self) -> list[str]:
        return ["corpus"]

    def corpus_stats(self, ctx: MetricContext) -> list[float]:
        """Return this row's BLEU sufficient statistics against its first reference only.

        Returns:
            ``[hypothesis length, reference length, matches for n = 1..4, totals for n = 1..4]``.

        Raises:
            MetricError: the candidate is the model output and the row has none.
            TemplateError: the candidate or first reference template failed.

        """
        candidate = self._candidate.render(self, ctx)
        references = self._render_references(ctx, self._references[:1])
        # Match counts and lengths do not depend on effective_order or smoothing.
        stats = self._sentence_score(candidate, references)
        vector = (stats.sys_len, stats.ref_len, *stats.counts, *stats.totals)
        return [float(value) for value in vector]

    def corpus_score(self, totals: Sequence[float]) -> dict[str, float]:
        """Compute corpus BLEU from the element-wise sum of every row's ``corpus_stats``.

        Uses ``sacrebleu.corpus_bleu``'s settings (exp smoothing, no effective order);
        no rows at all (an empty ``totals``) gives NaN.

        Raises:
            MetricError: ``totals`` is not a vector of BLEU statistics.

        """
        if not totals:
            return {"corpus": math.nan}
        if len(totals) != _STATS_LENGTH:
            raise MetricError(
                f"metric 'bleu' got {len(totals)} corpus statistics, expected {_STATS_LENGTH}; "
                "the statistics must come from Bleu.corpus_stats."
            )
        counts = [round(value) for value in totals]
        score = type(self._sentence).compute_bleu(
            correct=counts[2 : 2 + MAX_NGRAM_ORDER],
            total=counts[2 + MAX_NGRAM_ORDER :],
            sys_len=counts[0],
            ref_len=counts[1],
            smooth_method="exp",
            max_ngram_order=MAX_NGRAM_ORDER,
        )
        return {"corpus": score.score}

    def _sentence_score(self, candidate: str, references: list[str]) -> BLEUScore:
        last = self._last
        if last is not None and last[0] == candidate and last[1] == references:
            return last[2]
        result = self._sentence.sentence_score(candidate, references)
        self._last = (candidate, references, result)
        return result

    def _render_references(self, ctx: MetricContext, templates: list[Template]) -> list[str]:
        context = ctx.template_context
        return [render_text(template, context, "reference") for template in templates]
