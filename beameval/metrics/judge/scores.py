"""The LLM judge's score definitions (range and rubric) and their parsers, as config models."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from beameval.core.validators import unique

__all__ = [
    "JsonParser",
    "JudgeScore",
    "RangeScore",
    "RegexParser",
    "RubricLevel",
    "RubricScore",
    "ScoreParser",
    "json_key",
    "score_context",
]

SCORE_NAME = re.compile(r"^[a-z0-9_]+$")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JsonParser(_Frozen):
    """Read the score from the JSON object in the reply, at the top-level key ``json_path``.

    ``json_path`` defaults to the score's name.
    """

    type: Literal["json"] = "json"
    json_path: str | None = Field(default=None, min_length=1)


class RegexParser(_Frozen):
    """Read the score from the first capturing group of ``pattern``.

    ``method: match`` anchors the pattern at the start of the reply (Python ``re.match``);
    ``search`` finds it anywhere.
    """

    type: Literal["regex"]
    pattern: str
    method: Literal["match", "search"] = "match"

    @field_validator("pattern")
    @classmethod
    def _compiles_with_a_group(cls, pattern: str) -> str:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"is not a valid regular expression: {exc}") from None
        if compiled.groups < 1:
            raise ValueError("needs a capturing group, e.g. 'Score: (\\d+)'; group 1 is the score")
        return pattern


def _parser_kind(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("type", "json"))
    return str(getattr(value, "type", "json"))


ScoreParser = Annotated[
    Annotated[JsonParser, Tag("json")] | Annotated[RegexParser, Tag("regex")],
    Discriminator(
        _parser_kind, custom_error_type="parser_type", custom_error_message="parser type must be json or regex"
    ),
]


class _Score(_Frozen):
    name: str
    description: str | None = None
    parser: ScoreParser = Field(default_factory=JsonParser)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not SCORE_NAME.match(name):
            raise ValueError("must match ^[a-z0-9_]+$ (lower-case letters, digits and _)")
        return name


class RangeScore(_Score):
    """A numeric score between ``minimum`` and ``maximum`` (inclusive)."""

    minimum: int | float
    maximum: int | float

    @model_validator(mode="after")
    def _ordered(self) -> RangeScore:
        if not self.minimum < self.maximum:
            raise ValueError(f"minimum ({self.minimum}) must be less than maximum ({self.maximum})")
        return self

    @property
    def is_integer(self) -> bool:
        """True when the score is a whole number (``minimum`` was written as an integer)."""
        return isinstance(self.minimum, int)


class RubricLevel(_Frozen):
    """One level of a rubric: the label the judge answers with and the value it scores."""

    label: str = Field(min_length=1)
    description: str | None = None
    value: int | float


class RubricScore(_Score):
    """A score chosen from labelled levels (at least two, unique labels)."""

    rubric: Annotated[list[RubricLevel], Field(min_length=2)]

    @field_validator("rubric")
    @classmethod
    def _unique_labels(cls, levels: list[RubricLevel]) -> list[RubricLevel]:
        unique([level.label for level in levels], "rubric labels")
        return levels

    @property
    def values(self) -> dict[str, float]:
        """Label -> numeric value."""
        return {level.label: float(level.value) for level in self.rubric}


def _score_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "rubric" if "rubric" in value else "range"
    return "rubric" if isinstance(value, RubricScore) else "range"


JudgeScore = Annotated[
    Annotated[RangeScore, Tag("range")] | Annotated[RubricScore, Tag("rubric")],
    Discriminator(_score_kind),
]


def json_key(score: RangeScore | RubricScore) -> str | None:
    """The top-level JSON key a score is read from, or None when it uses a regex parser."""
    if isinstance(score.parser, JsonParser):
        return score.parser.json_path or score.name
    return None


def score_context(score: RangeScore | RubricScore) -> dict[str, Any]:
    """The score's definition without its parser, as prompt templates see it under ``scores.<name>``."""
    return score.model_dump(exclude={"parser"})
