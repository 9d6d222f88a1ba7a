"""The config of ``type: llm-judge`` (``beameval.metrics.llm_judge``): its keys and their checks.

Every check that can run without a row runs here, so a bad judge fails at config load
with the key's path: a template that does not compile, a structured-output schema that
misses a score, a score that cannot be calibrated, a pairwise judge with scores.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from beameval.config.endpoints import ModelTarget
from beameval.config.params import InferenceParams, ReasoningParams
from beameval.core.errors import ConfigError, EvaluatorError
from beameval.core.templates import Template
from beameval.core.validators import unique
from beameval.inference.targets.model_request import structured_output_params
from beameval.judges.calibration import CalibrationConfig, categories_of
from beameval.metrics.base import MetricConfig
from beameval.metrics.judge.pairwise import PREFERENCE_SCORE
from beameval.metrics.judge.schema import check_schema_covers_scores, derive_schema
from beameval.metrics.judge.scores import JudgeScore, RangeScore, RubricScore

__all__ = ["NAN_REASON", "LLMJudgeConfig"]

NAN_REASON = "nan_reason"
_FORBIDDEN_TEMPLATE_KEYS = ("system_prompt", "reasoning")


class LLMJudgeConfig(MetricConfig):
    """Config of ``type: llm-judge``.

    Attributes:
        model: the judge endpoint (``url``, ``name``, ``format``, ``api_key_env``).
        scores: the scores to ask for; range (``minimum``/``maximum``) or rubric (``rubric``).
            Required unless ``pairwise``, which asks for its own ``preference``.
        pairwise: compare the row's answer with the first target's (multi-target runs only),
            asking in both orders (``answer_a``/``answer_b`` swapped).
        prompt_template: a request template (dict) or completions prompt (str) over the
            metric context plus ``scores`` (and, pairwise, ``baseline``, ``answer_a`` and
            ``answer_b``); None uses the default prompt.
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
    scores: Annotated[list[JudgeScore], Field(min_length=1)] | None = None
    pairwise: bool = False
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
    def _unique_names(cls, scores: list[RangeScore | RubricScore] | None) -> list[RangeScore | RubricScore] | None:
        if scores is None:
            return None
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
    def _scores_or_pairwise(self) -> LLMJudgeConfig:
        if not self.pairwise:
            if self.scores is None:
                raise ValueError("scores is required: the scores to ask the judge for (or set pairwise: true)")
            return self
        if self.scores is not None:
            raise ValueError(
                "a pairwise judge asks for its own preference (A, B or tie) and scores 'preference' and "
                "'position_flip'; remove scores, or set pairwise: false"
            )
        if self.calibration is not None:
            raise ValueError("a pairwise judge cannot be calibrated against labels; remove calibration")
        source = str(self.prompt_template)
        if self.prompt_template is not None and ("answer_a" not in source or "answer_b" not in source):
            raise ValueError(
                "the prompt_template of a pairwise judge must show {{ answer_a }} and {{ answer_b }}: "
                "the judge is asked twice, with the two answers swapped"
            )
        return self

    @property
    def judged_scores(self) -> list[RangeScore | RubricScore]:
        """What the judge is asked for: ``scores``, or a pairwise judge's ``preference`` (A, B or tie)."""
        return [PREFERENCE_SCORE] if self.pairwise else list(self.scores or [])

    @model_validator(mode="after")
    def _calibratable_scores(self) -> LLMJudgeConfig:
        if self.calibration is not None:
            for score in self.judged_scores:
                categories_of(score)  # a ValueError names the score that cannot be calibrated
        return self

    @model_validator(mode="after")
    def _valid_structured_output(self) -> LLMJudgeConfig:
        if self.structured_output is False:
            return self
        try:
            if self.structured_output is None:
                derive_schema(self.judged_scores)  # raises ValueError on conflicting keys
                return self
            structured_output_params(self.model.format, self.structured_output)
            check_schema_covers_scores(self.structured_output["schema"], self.judged_scores)
        except ConfigError as exc:
            raise ValueError(exc.message.replace("params.structured_output", "structured_output")) from None
        except ValueError as exc:
            where = "scores" if self.structured_output is None else "structured_output"
            raise ValueError(f"{where}: {exc}") from None
        return self
