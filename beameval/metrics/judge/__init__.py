"""The parts of the ``llm-judge`` metric: score definitions, parsing, schema, prompt."""

from beameval.metrics.judge.parsing import ParsedScore, find_json_object, parse_reply, parse_score
from beameval.metrics.judge.prompt import DefaultPrompt, instructions
from beameval.metrics.judge.schema import check_schema_covers_scores, derive_schema
from beameval.metrics.judge.scores import (
    JsonParser,
    JudgeScore,
    RangeScore,
    RegexParser,
    RubricLevel,
    RubricScore,
    json_key,
    score_context,
)

__all__ = [
    "DefaultPrompt",
    "JsonParser",
    "JudgeScore",
    "ParsedScore",
    "RangeScore",
    "RegexParser",
    "RubricLevel",
    "RubricScore",
    "check_schema_covers_scores",
    "derive_schema",
    "find_json_object",
    "instructions",
    "json_key",
    "parse_reply",
    "parse_score",
    "score_context",
]
