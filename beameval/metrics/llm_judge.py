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
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from beameval.config.access import EndpointAccess
from beameval.config.endpoints import ModelTarget
from beameval.config.params import InferenceParams, Params, ReasoningParams
from beameval.core.errors import ConfigError, EvaluatorError, MetricError
from beameval.core.templates import Template
from beameval.core.validators import unique
from beameval.inference.prepared import PreparedRequest
from beameval.inference.targets.base import TargetHandler
from beameval.inference.targets.model import ModelHandler, as_request
from beameval.inference.targets.model_request import has_token_limit, structured_output_params
from beameval.judges.calibration import Calibration, CalibrationConfig, categories_of
from beameval.metrics.base import EndpointMetric, EndpointSettings, MetricConfig, MetricContext, register
from beameval.metrics.judge.parsing import parse_reply
from beameval.metrics.judge.prompt import DefaultPrompt
from beameval.metrics.judge.schema import check_schema_covers_scores, derive_schema
from beameval.metrics.judge.scores import JudgeScore, RangeScore, RubricScore, score_context

__all__ = ["JUDGE_MAX_TOKENS", "NAN_REASON", "LLMJudge", "LLMJudgeConfig"]

log = logging.getLogger(__name__)

JUDGE_MAX_TOKENS = 1024
NAN_REASON = "nan_reason"
_FORBIDDEN_TEMPLATE_KEYS = ("system_prompt", "reasoning")
_LOGGED_FAILURES = 5  # ignored request failures logged in full per worker and judge


class LLMJudgeConfig(MetricConfig):
    """Config of ``type: llm-judge``.

    Attributes:
        model: the judge endpoint (``url``, ``name``, ``format``, ``api_key_env``).
        scores: the scores to ask for; range (``minimum``/``maximum``) or rubric (``rubric``).
        prompt_template: a request template (dict) or completions prompt (str) over the
            metric context plus ``scores``; None uses the default prompt.
        structured_output: ``{schema, name?, strict?}``; None derives the schema from the
            JSON-parsed scores; ``false`` sends none.
        inference: request parameters merged into every judge request.
        system_prompt: added to the judge's system message (or prompt).
        reasoning: how to strip the judge's reasoning from its answer.
        ignore_request_failure: a failed judge call gives NaN scores instead of a row error.
        parallelism: the most judge requests in flight per worker process.
        max_retries: retries per judge request.
        request_timeout: seconds per judge attempt.
        calibration: human labels to measure the judge's agreement against (``judge_agreement``, ``ppi``).
    """

    model: ModelTarget
    scores: Annotated[list[JudgeScore], Field(min_length=1)]
    prompt_template: str | dict[str, Any] | None = None
    structured_output: dict[str, Any] | Literal[False] | None = None
    inference: InferenceParams | None = None
    system_prompt: str | None = None
    reasoning: ReasoningParams | None = None
    ignore_request_failure: bool = False
    parallelism: Annotated[int, Field(ge=1, le=4096)] = 8
    max_retries: Annotated[int, Field(ge=0, le=100)] = 3
    request_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 120.0
    calibration: CalibrationConfig | None = None

    @field_validator("scores")
    @classmethod
    def _unique_names(cls, scores: list[RangeScore | RubricScore]) -> list[RangeScore | RubricScore]:
        names = [score.name for score in scores]
        unique(names, "score names")
        if NAN_REASON in names:
            raise ValueError(f"{NAN_REASON!r} is reserved for the judge's own output; rename the score")
        return scores

    @field_validator("prompt_template")
    @classmethod
    def _valid_template(cls, template: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(template, dict):
            forbidden = [key for key in _FORBIDDEN_TEMPLATE_KEYS if key in template]
            if forbidden:
                raise ValueError(
                    f"may not contain {forbidden}; set them as the judge's own system_prompt / reasoning keys"
                )
        if template is not None:
            try:
                Template(template, "prompt_template")
            except EvaluatorError as exc:
                raise ValueError(exc.message) from None
        return template

    @model_validator(mode="after")
    def _calibratable_scores(self) -> LLMJudgeConfig:
        if self.calibration is not None:
            for score in self.scores:
                categories_of(score)  # a ValueError names the score that cannot be calibrated
        return self

    @model_validator(mode="after")
    def _valid_structured_output(self) -> LLMJudgeConfig:
        if self.structured_output is False:
            return self
        try:
            if self.structured_output is None:
                derive_schema(self.scores)  # raises ValueError on conflicting keys
                return self
            structured_output_params(self.model.format, self.structured_output)
            check_schema_covers_scores(self.structured_output["schema"], self.scores)
        except ConfigError as exc:
            raise ValueError(exc.message.replace("params.structured_output", "structured_output")) from None
        except ValueError as exc:
            where = "scores" if self.structured_output is None else "structured_output"
            raise ValueError(f"{where}: {exc}") from None
        return self


@register("llm-judge")
class LLMJudge(EndpointMetric[LLMJudgeConfig]):
    """Scores each row with an LLM judge; per score ``<name>``, per rubric score ``<name>.label``."""

    config_class = LLMJudgeConfig

    def __init__(self, config: LLMJudgeConfig) -> None:
        super().__init__(config)
        self._scores: list[RangeScore | RubricScore] = list(config.scores)
        self._scores_context = {score.name: score_context(score) for score in self._scores}
        self._template = (
            Template(config.prompt_template, "prompt_template") if config.prompt_template is not None else None
        )
        self._default = DefaultPrompt(self._scores, completions="/v1/completions" in config.model.url)
        self._params = Params(
            system_prompt=config.system_prompt,
            inference=config.inference,
            reasoning=config.reasoning,
            structured_output=self._structured_output(),
        )
        self._inference = config.inference.as_request_params() if config.inference is not None else {}
        self.label_outputs = (  # type: ignore[misc]  # per instance: one label per rubric score
            *(f"{score.name}.label" for score in self._scores if isinstance(score, RubricScore)),
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
        return [score.name for score in self._scores]

    def rubric_definitions(self) -> dict[str, list[tuple[str, float, str | None]]]:
        """Rubric score output name -> its levels ``(label, value, description)``, in declaration order.

        The results builder aggregates these outputs as rubric scores (``beameval.stats.rubric``),
        with the labels of the ``<name>.label`` outputs.
        """
        return {
            score.name: [(level.label, float(level.value), level.description) for level in score.rubric]
            for score in self._scores
            if isinstance(score, RubricScore)
        }

    def output_ranges(self) -> dict[str, tuple[float, float]]:
        """A range score's declared ``[minimum, maximum]``; a rubric score's lowest and highest level value."""
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

    def build_request(self, ctx: MetricContext) -> PreparedRequest:
        """Render the judge prompt for a row (``max_tokens=1024`` unless a token limit is set)."""
        if self._template is not None:
            rendered = self._template.render({**ctx.template_context, "scores": self._scores_context})
        else:
            rendered = self._default.render(ctx.item, ctx.sample)
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
        reply = self.reply(ctx)
        if reply.error is not None or reply.sample is None:
            message = reply.error or "the judge gave no answer"
            if not self.config.ignore_request_failure:
                raise MetricError(
                    f"the judge request failed: {message}",
                    hint="Set ignore_request_failure: true on the judge to score such rows as NaN.",
                )
            self._log_ignored(message)
            status = f", HTTP {reply.status}" if reply.status is not None else ""
            return self._all_nan(f"the judge request failed ({reply.failure_class or 'error'}{status}) and was ignored")
        text = reply.sample.get("output_text")
        parsed = parse_reply(text if isinstance(text, str) else "", self._scores)
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

    def detail_names(self) -> list[str]:
        return ["reply"]

    def row_details(self, ctx: MetricContext) -> dict[str, str | None]:
        """The judge's reply as JSON (``{"text", "model"}``), or None when the row has none."""
        reply = ctx.responses.get(self.key) if ctx.responses is not None else None
        if reply is None or reply.sample is None:
            return {"reply": None}
        response = reply.sample.get("response")
        model = response.get("model") if isinstance(response, Mapping) else None
        return {"reply": json.dumps({"text": reply.sample.get("output_text"), "model": model})}

    def _all_nan(self, reason: str) -> dict[str, float | str]:
        out: dict[str, float | str] = {}
        for score in self._scores:
            out[score.name] = float("nan")
            if isinstance(score, RubricScore):
                out[f"{score.name}.label"] = ""
        out[NAN_REASON] = reason
        return out

    def _log_ignored(self, message: str) -> None:
        if self._logged_failures < _LOGGED_FAILURES:
            self._logged_failures += 1
            log.warning(
                "metric '%s': judge request failed, scored as NaN (ignore_request_failure): %s", self.key, message
            )
