"""llm-judge: an LLM scores each row against declared range and rubric scores.

The judge is an ``EndpointMetric``: ``transforms.metric_calls.CallMetricEndpoints`` sends
its request (``build_request``) through the worker's shared inference engine before
scoring (or, with ``model.mode: batch``, ``transforms.metric_batch`` sends all of them
through the provider's Batch API), and ``score`` only parses the reply. Behaviour follows the reference SDK's
judge (docs/METRICS.md, `llm-judge`), with these fixes:

* **JSON in fences or prose is read.** The reply is parsed whole first; otherwise the
  first ``{...}`` that decodes to a JSON object is used, so a reply in a Markdown code
  fence or with prose around the JSON scores normally (the reference gives NaN).
* **A reply that cannot be parsed is a clean NaN, not a row error.** Every score is NaN
  and every rubric label ``""``; the row still succeeds, and the label output
  ``nan_reason`` says why (the reference drops ``<name>.label`` and fails the row).
* **Range scores are checked.** A value outside ``[minimum, maximum]`` (or not finite)
  gives NaN; the reference keeps a 9 on a 1-5 scale. ``true``/``false`` count as 1/0
  and are range-checked too.
* **An unknown rubric label** gives NaN and label ``""`` (as in the reference) and a
  ``nan_reason``.
* **``ignore_request_failure`` covers every endpoint failure**, exhausted retries
  included: the scores are NaN, labels ``""`` and ``nan_reason`` records the failure
  class and HTTP status. Without it a failed judge call fails the row (phase scoring) with
  the endpoint's message. A prompt that fails to render always fails the row.
* **Timeout and retries are configurable** (``request_timeout`` 120 s, ``max_retries`` 3,
  ``parallelism`` 8) instead of a fixed 600 s and 3 retries.
* A regex parser without a capturing group is a config error instead of NaN on every row.

* **Calibration** (``calibration:``, ``beameval.judges.calibration``): with human labels,
  each row also adds counts (confusion matrix, unlabelled judge values) that the run sums
  like a corpus metric's statistics; results.json reports ``judge_agreement`` and each
  judge score's ``ppi`` from them.
* **Pairwise judging** (``pairwise: true``, ``beameval.metrics.judge.pairwise``): the row's
  answer against the first target's, asked in both orders (a second call per row under
  ``<key>.swapped``); outputs ``preference``, ``preference.label`` and ``position_flip``
  instead of ``scores``.

``nan_reason`` is ``""`` when every score is a number, else ``"<score>: <reason>"`` joined
with ``"; "``. Reasons never quote the reply, so they take few distinct values.

Not carried over from the reference: the NIM structured-output probe (the judge always
uses its format's mode: ``nvext.guided_json`` for nim, ``response_format`` for openai;
``structured_output: false`` turns it off for endpoints without guided decoding), the
switch to ``max_completion_tokens`` after a 400 (set ``beameval.inference.max_completion_tokens``
instead), and ``optional_fields``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from beameval.config.access import EndpointAccess
from beameval.config.params import Params
from beameval.core.errors import MetricError
from beameval.core.records import EndpointReply
from beameval.core.templates import Template
from beameval.inference.prepared import PreparedRequest
from beameval.inference.targets.base import TargetHandler
from beameval.inference.targets.model import ModelHandler, as_request
from beameval.inference.targets.model_request import has_token_limit
from beameval.judges.calibration import Calibration
from beameval.metrics.base import EndpointMetric, EndpointSettings, MetricContext, register
from beameval.metrics.judge.config import NAN_REASON, LLMJudgeConfig
from beameval.metrics.judge.pairwise import (
    FLIP,
    OUTCOMES,
    PREFERENCE,
    SwappedOrder,
    answers,
    outcome_value,
    pairwise_instructions,
    pairwise_subject,
    verdict,
)
from beameval.metrics.judge.parsing import parse_reply
from beameval.metrics.judge.prompt import DefaultPrompt
from beameval.metrics.judge.schema import derive_schema
from beameval.metrics.judge.scores import RubricScore, score_context

__all__ = ["JUDGE_MAX_TOKENS", "NAN_REASON", "LLMJudge", "LLMJudgeConfig"]

log = logging.getLogger(__name__)

JUDGE_MAX_TOKENS = 1024
_LOGGED_FAILURES = 5  # ignored request failures logged in full per worker and judge


@register("llm-judge")
class LLMJudge(EndpointMetric[LLMJudgeConfig]):
    """Scores each row with an LLM judge; per score ``<name>``, per rubric score ``<name>.label``."""

    config_class = LLMJudgeConfig

    def __init__(self, config: LLMJudgeConfig) -> None:
        super().__init__(config)
        self._scores = config.judged_scores
        self._scores_context = {score.name: score_context(score) for score in self._scores}
        self._template = (
            Template(config.prompt_template, "prompt_template") if config.prompt_template is not None else None
        )
        self._default = DefaultPrompt(self._scores, completions="/v1/completions" in config.model.url)
        if config.pairwise:
            self._default.system = pairwise_instructions()
        self._params = Params(
            system_prompt=config.system_prompt,
            inference=config.inference,
            reasoning=config.reasoning,
            structured_output=self._structured_output(),
        )
        self._inference = config.inference.as_request_params() if config.inference is not None else {}
        labelled = [PREFERENCE] if config.pairwise else [s.name for s in self._scores if isinstance(s, RubricScore)]
        self.label_outputs = (  # type: ignore[misc]  # per instance: one label per rubric score
            *(f"{name}.label" for name in labelled),
            NAN_REASON,
        )
        self._handler: ModelHandler | None = None
        self._logged_failures = 0
        #: the human labels and their counting, or None without ``calibration:`` (reads the labels file).
        self.calibration = Calibration(config.calibration, self._scores) if config.calibration is not None else None

    def _structured_output(self) -> dict[str, Any] | None:
        if self.config.structured_output is False:
            return None
        if self.config.structured_output is not None:
            return self.config.structured_output
        schema = derive_schema(self._scores)
        return None if schema is None else {"schema": schema, "name": "judge_scores"}

    def output_names(self) -> list[str]:
        return [PREFERENCE, FLIP] if self.config.pairwise else [score.name for score in self._scores]

    def rubric_definitions(self) -> dict[str, list[tuple[str, float, str | None]]]:
        """Rubric score output name -> its levels ``(label, value, description)``, in declaration order.

        The results builder aggregates these outputs as rubric scores (``beameval.stats.rubric``),
        with the labels of the ``<name>.label`` outputs. A pairwise judge's ``preference`` is
        the candidate's loss (0), tie (0.5) or win (1).
        """
        if self.config.pairwise:
            return {PREFERENCE: list(OUTCOMES)}
        return {
            score.name: [(level.label, float(level.value), level.description) for level in score.rubric]
            for score in self._scores
            if isinstance(score, RubricScore)
        }

    def output_ranges(self) -> dict[str, tuple[float, float]]:
        """A range score's declared ``[minimum, maximum]``; a rubric score's lowest and highest level value.

        A pairwise judge's ``preference`` lies in [0, 1]; its ``position_flip`` has no range, so
        a comparison reports it without gating on it (more flips is not better).
        """
        if self.config.pairwise:
            return {PREFERENCE: (0.0, 1.0)}
        ranges = {}
        for score in self._scores:
            if isinstance(score, RubricScore):
                values = [float(level.value) for level in score.rubric]
                ranges[score.name] = (min(values), max(values))
            else:
                ranges[score.name] = (float(score.minimum), float(score.maximum))
        return ranges

    # The endpoint phase (CallMetricEndpoints).
    def endpoint_handler(self) -> TargetHandler:
        if self._handler is None:
            self._handler = ModelHandler(self.config.model, self._params, self.config.model.api_key())
        return self._handler

    @property
    def endpoint_access(self) -> EndpointAccess:
        return self.config.model

    @property
    def endpoint_settings(self) -> EndpointSettings:
        return EndpointSettings(self.config.parallelism, self.config.max_retries, self.config.request_timeout)

    def endpoint_calls(self) -> tuple[EndpointMetric[Any], ...]:
        """Itself, and for a pairwise judge the call with the answers swapped (``<key>.swapped``)."""
        return (self, SwappedOrder(self)) if self.config.pairwise else (self,)

    def needs_call(self, ctx: MetricContext) -> bool:
        """A pairwise judge asks only when the first target answered the row differently."""
        if not self.config.pairwise:
            return True
        pair = answers(ctx)
        return pair.baseline is not None and not pair.identical

    def build_request(self, ctx: MetricContext) -> PreparedRequest:
        """Render the judge prompt for a row (``max_tokens=1024`` unless a token limit is set)."""
        if self.config.pairwise:
            return self.pair_request(ctx, swapped=False)
        if self._template is not None:
            rendered = self._template.render({**ctx.template_context, "scores": self._scores_context})
        else:
            rendered = self._default.render(ctx.item, ctx.sample)
        return self._request(rendered, ctx)

    def pair_request(self, ctx: MetricContext, swapped: bool) -> PreparedRequest:
        """A pairwise judge's request: the row's answer as A and the baseline's as B, or ``swapped``."""
        answer_a, answer_b = answers(ctx).shown(swapped)
        if self._template is not None:
            context = {**ctx.template_context, "scores": self._scores_context, "answer_a": answer_a}
            rendered = self._template.render({**context, "answer_b": answer_b})
        else:
            rendered = self._default.render_subject(pairwise_subject(answer_a, answer_b))
        return self._request(rendered, ctx)

    def _request(self, rendered: Any, ctx: MetricContext) -> PreparedRequest:
        request = as_request(rendered)
        if not has_token_limit(request, self._inference):
            request["max_tokens"] = JUDGE_MAX_TOKENS
        return self.endpoint_handler().prepare(request, ctx.item)

    # The scoring phase.
    def collects_corpus_stats(self) -> bool:
        return self.calibration is not None

    def corpus_stats(self, ctx: MetricContext) -> list[float] | None:
        """With calibration, this row's agreement counts (``Calibration.row_counts``)."""
        if self.calibration is None:
            return None
        reply = self.reply(ctx)
        text = reply.sample.get("output_text") if reply.error is None and reply.sample is not None else None
        parsed = parse_reply(text if isinstance(text, str) else "", self._scores)  # "" parses as NaN everywhere
        judged = {score.name: (result.value, result.label) for score, result in zip(self._scores, parsed, strict=True)}
        return self.calibration.row_counts(ctx.item, judged)

    def score(self, ctx: MetricContext) -> Mapping[str, float | str]:
        if self.config.pairwise:
            return self._pair_score(ctx)
        reply = self.reply(ctx)
        failed = self._failed(reply)
        if failed is not None:
            return failed
        parsed = parse_reply(_text(reply), self._scores)
        out: dict[str, float | str] = {}
        reasons = []
        for score, result in zip(self._scores, parsed, strict=True):
            out[score.name] = result.value
            if isinstance(score, RubricScore):
                out[f"{score.name}.label"] = result.label
            if result.reason is not None:
                reasons.append(f"{score.name}: {result.reason}")
        out[NAN_REASON] = "; ".join(reasons)
        return out

    def _pair_score(self, ctx: MetricContext) -> dict[str, float | str]:
        """The row's outcome for the candidate: counted only when both orders agree (``pairwise.verdict``)."""
        pair = answers(ctx)
        if pair.baseline is None:
            return self._all_nan("the first target has no answer for this row")
        if pair.identical:
            reason = f"{FLIP}: identical answers, a tie without asking the judge"
            return {PREFERENCE: outcome_value("tie"), f"{PREFERENCE}.label": "tie", FLIP: math.nan, NAN_REASON: reason}
        labels = []
        for call in self.endpoint_calls():
            reply = call.reply(ctx)
            failed = self._failed(reply)
            if failed is not None:
                return failed
            (result,) = parse_reply(_text(reply), self._scores)
            if result.reason is not None:
                order = "swapped order" if call is not self else "first order"
                return self._all_nan(f"{PREFERENCE} ({order}): {result.reason}")
            labels.append(result.label)
        outcome, flip = verdict(*labels)
        return {PREFERENCE: outcome_value(outcome), f"{PREFERENCE}.label": outcome, FLIP: flip, NAN_REASON: ""}

    def _failed(self, reply: EndpointReply) -> dict[str, float | str] | None:
        """None for an answered call; the row's NaN scores for a failed one (``ignore_request_failure``).

        Raises:
            MetricError: the call failed and failures are not ignored.
        """
        if reply.error is None and reply.sample is not None:
            return None
        message = reply.error or "the judge gave no answer"
        if not self.config.ignore_request_failure:
            raise MetricError(
                f"the judge request failed: {message}",
                hint="Set ignore_request_failure: true on the judge to score such rows as NaN.",
            )
        self._log_ignored(message)
        status = f", HTTP {reply.status}" if reply.status is not None else ""
        return self._all_nan(f"the judge request failed ({reply.failure_class or 'error'}{status}) and was ignored")

    def detail_names(self) -> list[str]:
        return ["reply"]

    def row_details(self, ctx: MetricContext) -> dict[str, str | None]:
        """The judge's reply as JSON (``{"text", "model"}``, pairwise also ``swapped``: the other order's text).

        None when the row has none.
        """
        responses = ctx.responses or {}
        reply = responses.get(self.key)
        if reply is None or reply.sample is None:
            return {"reply": None}
        response = reply.sample.get("response")
        model = response.get("model") if isinstance(response, Mapping) else None
        found = {"text": reply.sample.get("output_text"), "model": model}
        if self.config.pairwise:
            swapped = responses.get(self.endpoint_calls()[-1].key)
            found["swapped"] = swapped.sample.get("output_text") if swapped and swapped.sample else None
        return {"reply": json.dumps(found)}

    def _all_nan(self, reason: str) -> dict[str, float | str]:
        out: dict[str, float | str] = {}
        for score in self._scores:
            out[score.name] = float("nan")
            if isinstance(score, RubricScore):
                out[f"{score.name}.label"] = ""
        if self.config.pairwise:
            out[FLIP] = math.nan
        out[NAN_REASON] = reason
        return out

    def _log_ignored(self, message: str) -> None:
        if self._logged_failures < _LOGGED_FAILURES:
            self._logged_failures += 1
            log.warning(
                "metric '%s': judge request failed, scored as NaN (ignore_request_failure): %s", self.key, message
            )


def _text(reply: EndpointReply) -> str:
    """An answered call's text (``""`` when there is none: it parses as NaN everywhere)."""
    text = reply.sample.get("output_text") if reply.sample is not None else None
    return text if isinstance(text, str) else ""
