"""llm-judge: score definitions, reply parsing, schema derivation, request building and scoring (no HTTP)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from beameval.config.schema import parse_config
from beameval.core.errors import ConfigError, MetricError
from beameval.core.records import EndpointReply
from beameval.metrics.base import EndpointMetric, MetricContext
from beameval.metrics.judge import (
    RangeScore,
    RubricScore,
    check_schema_covers_scores,
    derive_schema,
    find_json_object,
    parse_reply,
    parse_score,
)
from beameval.metrics.llm_judge import LLMJudge, LLMJudgeConfig
from beameval.metrics.registry import config_model, resolve

URL = "http://judge:8000/v1"
QUALITY = {"name": "quality", "minimum": 1, "maximum": 5, "description": "How helpful the answer is."}
TONE = {
    "name": "tone",
    "rubric": [
        {"label": "formal", "value": 1, "description": "Professional wording."},
        {"label": "casual", "value": 0},
    ],
}


def judge(**fields: Any) -> LLMJudge:
    data = {"type": "llm-judge", "model": {"url": URL, "name": "judge"}, "scores": [QUALITY, TONE], **fields}
    metric = resolve(config_model("llm-judge").model_validate(data), "llm-judge")
    assert isinstance(metric, LLMJudge)
    return metric


def config_error(**fields: Any) -> str:
    data = {"model": {"url": URL, "name": "judge"}, "scores": [QUALITY], **fields}
    with pytest.raises(ConfigError) as info:
        parse_config({"dataset": {"path": "x.jsonl"}, "metrics": [{"type": "llm-judge", **data}]})
    return str(info.value)


def range_score(**fields: Any) -> RangeScore:
    return RangeScore.model_validate({**QUALITY, **fields})


def rubric_score(**fields: Any) -> RubricScore:
    return RubricScore.model_validate({**TONE, **fields})


def nan(value: float) -> bool:
    return isinstance(value, float) and math.isnan(value)


# ---- JSON extraction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"quality": 4}',
        '  {"quality": 4}\n',
        '```json\n{"quality": 4}\n```',
        '```\n{"quality": 4}\n```',
        'Here is my verdict: {"quality": 4}. Hope it helps!',
        'Reasoning {not json here} then {"quality": 4} and {"quality": 1}',
    ],
)
def test_the_first_json_object_is_found_in_fences_and_prose(text: str) -> None:
    assert find_json_object(text) == ({"quality": 4}, None)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "the reply is empty"),
        ("   ", "the reply is empty"),
        ("[1, 2]", "the reply is a JSON list, not an object"),
        ("4", "the reply is a JSON number, not an object"),
        ("I would give it four.", "no JSON object found in the reply"),
        ("{broken: json}", "no JSON object found in the reply"),
    ],
)
def test_no_json_object(text: str, reason: str) -> None:
    assert find_json_object(text) == (None, reason)


def test_nested_objects_are_kept_whole() -> None:
    assert find_json_object('x {"a": {"b": 1}, "quality": 2} y')[0] == {"a": {"b": 1}, "quality": 2}


# ---- JSON parser -----------------------------------------------------------------------------


def test_json_range_and_rubric() -> None:
    quality, tone = parse_reply('{"quality": 4, "tone": "casual"}', [range_score(), rubric_score()])
    assert (quality.value, quality.label, quality.reason) == (4.0, "", None)
    assert (tone.value, tone.label, tone.reason) == (0.0, "casual", None)


def test_fenced_reply_scores_normally() -> None:
    quality, tone = parse_reply('```json\n{"quality": 5, "tone": "formal"}\n```', [range_score(), rubric_score()])
    assert (quality.value, tone.value, tone.label) == (5.0, 1.0, "formal")


def test_unparseable_reply_is_a_clean_nan_with_empty_label() -> None:
    quality, tone = parse_reply("I cannot decide.", [range_score(), rubric_score()])
    assert nan(quality.value) and nan(tone.value)
    assert tone.label == ""
    assert quality.reason == tone.reason == "no JSON object found in the reply"


@pytest.mark.parametrize(("value", "expected"), [(1, 1.0), (5, 5.0), (2.5, 2.5), (0, None), (9, None), (5.01, None)])
def test_range_scores_outside_the_range_are_nan(value: float, expected: float | None) -> None:
    parsed = parse_score(f'{{"quality": {value}}}', range_score())
    if expected is None:
        assert nan(parsed.value)
        assert parsed.reason == "the value is outside [1, 5]"
    else:
        assert parsed.value == expected and parsed.reason is None


def test_booleans_count_as_one_and_zero() -> None:
    score = range_score(minimum=0, maximum=1)
    assert parse_score('{"quality": true}', score).value == 1.0
    assert parse_score('{"quality": false}', score).value == 0.0
    assert nan(parse_score('{"quality": false}', range_score()).value)  # 0 is outside [1, 5]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ('{"quality": "4"}', "the value for 'quality' is a string, not a number"),
        ('{"quality": null}', "the reply's JSON has no value for 'quality'"),
        ('{"other": 3}', "the reply's JSON has no value for 'quality'"),
        ('{"quality": [4]}', "the value for 'quality' is a list, not a number"),
        ('{"quality": NaN}', "the value is not a finite number"),
    ],
)
def test_unusable_range_values(reply: str, reason: str) -> None:
    parsed = parse_score(reply, range_score())
    assert nan(parsed.value) and parsed.reason == reason


def test_unknown_rubric_label_is_nan_with_empty_label() -> None:
    parsed = parse_score('{"tone": "sarcastic"}', rubric_score())
    assert nan(parsed.value) and parsed.label == ""
    assert parsed.reason == "the label is not one of the rubric's labels"
    assert nan(parse_score('{"tone": 1}', rubric_score()).value)


def test_json_path_names_the_key() -> None:
    score = range_score(parser={"json_path": "score"})
    assert parse_score('{"score": 3, "quality": 1}', score).value == 3.0


# ---- regex parser ----------------------------------------------------------------------------


def test_regex_match_is_anchored_and_search_is_not() -> None:
    anchored = range_score(parser={"type": "regex", "pattern": r"Score: (\d+)"})
    anywhere = range_score(parser={"type": "regex", "pattern": r"Score: (\d+)", "method": "search"})
    assert anchored.parser.method == "match"
    assert parse_score("Score: 3", anchored).value == 3.0
    assert nan(parse_score("My verdict. Score: 3", anchored).value)
    assert parse_score("My verdict. Score: 3", anywhere).value == 3.0
    assert nan(parse_score("Score: 7", anywhere).value)  # out of range
    assert nan(parse_score("", anywhere).value)


def test_regex_rubric_label() -> None:
    score = rubric_score(parser={"type": "regex", "pattern": r"(?s).*Tone: (\w+)", "method": "match"})
    parsed = parse_score("Thinking...\nTone: formal", score)
    assert (parsed.value, parsed.label) == (1.0, "formal")
    parsed = parse_score("Tone: rude", score)
    assert nan(parsed.value) and parsed.label == ""


def test_regex_optional_group_not_taken() -> None:
    score = range_score(parser={"type": "regex", "pattern": r"Score:(?: (\d))?", "method": "search"})
    parsed = parse_score("Score:", score)
    assert nan(parsed.value) and parsed.reason == "the pattern's group 1 did not capture anything"


def test_regex_without_a_group_is_a_config_error() -> None:
    assert "capturing group" in config_error(scores=[{**QUALITY, "parser": {"type": "regex", "pattern": r"\d"}}])
    assert "regular expression" in config_error(scores=[{**QUALITY, "parser": {"type": "regex", "pattern": "("}}])


# ---- structured output -----------------------------------------------------------------------


def test_derived_schema() -> None:
    scores = [range_score(), range_score(name="fluency", minimum=0.0, maximum=1.0), rubric_score()]
    assert derive_schema(scores) == {
        "type": "object",
        "properties": {
            "quality": {"type": "integer", "minimum": 1, "maximum": 5},
            "fluency": {"type": "number", "minimum": 0.0, "maximum": 1.0},
            "tone": {"type": "string", "enum": ["formal", "casual"]},
        },
        "required": ["quality", "fluency", "tone"],
    }


def test_regex_scores_are_left_out_of_the_schema() -> None:
    regex = range_score(parser={"type": "regex", "pattern": r"(\d)"})
    assert derive_schema([regex]) is None
    assert list(derive_schema([regex, rubric_score()])["properties"]) == ["tone"]  # type: ignore[index]


def test_conflicting_keys_are_rejected() -> None:
    other = {**QUALITY, "name": "other", "maximum": 10, "parser": {"json_path": "quality"}}
    message = config_error(scores=[QUALITY, other])
    assert "different definitions" in message
    # the same definition read twice is fine
    parse_config(
        {
            "dataset": {"path": "x"},
            "metrics": [
                {
                    "type": "llm-judge",
                    "model": {"url": URL, "name": "j"},
                    "scores": [QUALITY, {**QUALITY, "name": "again", "parser": {"json_path": "quality"}}],
                }
            ],
        }
    )


def test_user_schema_must_cover_the_scores() -> None:
    good = {"type": "object", "properties": {"quality": {"type": "integer"}, "tone": {"type": "string"}}}
    check_schema_covers_scores(good, [range_score(), rubric_score()])
    with pytest.raises(ValueError, match="does not declare the property 'tone'"):
        check_schema_covers_scores({"type": "object", "properties": {"quality": {}}}, [rubric_score()])
    with pytest.raises(ValueError, match="must have type string"):
        check_schema_covers_scores({"type": "object", "properties": {"tone": {"type": "number"}}}, [rubric_score()])
    with pytest.raises(ValueError, match="number, integer or boolean"):
        check_schema_covers_scores({"type": "object", "properties": {"quality": {"type": "string"}}}, [range_score()])
    with pytest.raises(ValueError, match="object schema"):
        check_schema_covers_scores({"type": "array"}, [range_score()])
    assert "does not declare" in config_error(structured_output={"schema": {"type": "object", "properties": {}}})
    assert "JSON Schema" in config_error(structured_output={"schema": {"type": 5}})


def test_structured_output_in_the_request() -> None:
    nim = judge().build_request(MetricContext({}, {"output_text": "x"})).body
    assert nim["nvext"]["guided_json"] == derive_schema([range_score(), rubric_score()])
    openai = judge(model={"url": URL, "name": "j", "format": "openai"})
    body = openai.build_request(MetricContext({}, {"output_text": "x"})).body
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["quality", "tone"]
    off = judge(structured_output=False).build_request(MetricContext({}, {"output_text": "x"})).body
    assert "nvext" not in off and "response_format" not in off
    schema = {"type": "object", "properties": {"quality": {"type": "number"}, "tone": {"type": "string"}}}
    own = judge(structured_output={"schema": schema}).build_request(MetricContext({}, {"output_text": "x"})).body
    assert own["nvext"]["guided_json"] == schema


# ---- config ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"scores": []}, "at least 1"),
        ({"scores": [QUALITY, QUALITY]}, "must be unique"),
        ({"scores": [{**QUALITY, "name": "Quality"}]}, "^[a-z0-9_]+$"),
        ({"scores": [{**QUALITY, "name": "nan_reason"}]}, "reserved"),
        ({"scores": [{**QUALITY, "minimum": 5, "maximum": 5}]}, "must be less than maximum"),
        ({"scores": [{**TONE, "rubric": TONE["rubric"][:1]}]}, "at least 2"),
        ({"scores": [{**TONE, "rubric": [TONE["rubric"][0]] * 2}]}, "labels must be unique"),
        ({"scores": [{**QUALITY, "parser": {"type": "xml"}}]}, "parser type must be json or regex"),
        ({"prompt_template": {"messages": [], "system_prompt": "x"}}, "system_prompt"),
        ({"prompt_template": "{{ broken"}, "syntax error"),
        ({"request_timeout": 0}, "greater than 0"),
        ({"max_retries": -1}, "greater than or equal to 0"),
        ({"model": {"url": "judge:8000", "name": "j"}}, "http"),
        ({"model": {"url": URL, "name": "j", "api_key_env": "sk-123"}}, "NAME of an environment variable"),
        ({"unknown": 1}, "unknown key"),
    ],
)
def test_invalid_configs(fields: dict[str, Any], fragment: str) -> None:
    assert fragment in config_error(**fields)


def test_defaults() -> None:
    data = {"type": "llm-judge", "model": {"url": URL, "name": "j"}, "scores": [QUALITY]}
    config = LLMJudgeConfig.model_validate(data)
    assert (config.parallelism, config.max_retries, config.request_timeout) == (8, 3, 120.0)
    assert config.ignore_request_failure is False
    metric = resolve(config)
    assert isinstance(metric, EndpointMetric)
    assert tuple(metric.endpoint_settings) == (8, 3, 120.0)


def test_outputs_and_rubric_definitions() -> None:
    metric = judge()
    assert metric.output_names() == ["quality", "tone"]
    assert metric.label_outputs == ("tone.label", "nan_reason")
    assert metric.rubric_definitions() == {"tone": [("formal", 1.0, "Professional wording."), ("casual", 0.0, None)]}


# ---- request building ------------------------------------------------------------------------


def test_default_chat_prompt_online() -> None:
    request = judge().build_request(MetricContext({"question": "Why?"}, {"output_text": "Because."}))
    assert request.url == "http://judge:8000/v1/chat/completions"
    system, user = request.body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    assert "quality: a whole number from 1 to 5. How helpful the answer is." in system["content"]
    assert '"formal": Professional wording.' in system["content"]
    assert '"casual"' in system["content"]
    assert '"quality", "tone"' in system["content"]
    assert user["content"].endswith("Because.")
    assert request.body["max_tokens"] == 1024
    assert request.body["model"] == "judge"


def test_default_prompt_offline_judges_the_whole_row() -> None:
    request = judge().build_request(MetricContext({"question": "Why?", "answer": "Because."}, {}))
    user = request.body["messages"][1]["content"]
    assert user.endswith('{"question": "Why?", "answer": "Because."}')


def test_default_completions_prompt() -> None:
    metric = judge(model={"url": "http://judge:8000/v1/completions", "name": "j"})
    request = metric.build_request(MetricContext({}, {"output_text": "Because."}))
    assert request.url == "http://judge:8000/v1/completions"
    assert isinstance(request.body["prompt"], str)
    assert request.body["prompt"].startswith("You are an expert evaluator.")
    assert "Because." in request.body["prompt"]


def test_user_template_sees_the_row_and_the_scores() -> None:
    template = {
        "messages": [
            {"role": "user", "content": "Q: {{ item.question }} A: {{ output_text }} max {{ scores.quality.maximum }}"}
        ],
        "temperature": 0,
    }
    metric = judge(prompt_template=template, system_prompt="Be strict.", inference={"top_p": 0.5})
    body = metric.build_request(MetricContext({"question": "Why?"}, {"output_text": "Because."})).body
    assert body["messages"] == [
        {"role": "system", "content": "Be strict."},
        {"role": "user", "content": "Q: Why? A: Because. max 5"},
    ]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0, 0.5, 1024)


def test_max_tokens_is_added_only_when_absent() -> None:
    ctx = MetricContext({}, {"output_text": "x"})
    template = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 50}
    assert judge(prompt_template=template).build_request(ctx).body["max_tokens"] == 50
    assert judge(inference={"max_tokens": 77}).build_request(ctx).body["max_tokens"] == 77
    body = judge(inference={"max_completion_tokens": 99}).build_request(ctx).body
    assert body["max_completion_tokens"] == 99 and "max_tokens" not in body


def test_string_template_is_a_completions_prompt() -> None:
    body = judge(prompt_template="Rate: {{ output_text }}").build_request(MetricContext({}, {"output_text": "x"})).body
    assert body["prompt"] == "Rate: x"


def test_api_key_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "secret-value")
    metric = judge(model={"url": URL, "name": "j", "api_key_env": "JUDGE_KEY_FOR_TEST"})
    assert metric.endpoint_handler().headers["Authorization"] == "Bearer secret-value"
    assert "Authorization" not in judge().endpoint_handler().headers


# ---- scoring from a reply --------------------------------------------------------------------


def scored(metric: LLMJudge, reply: EndpointReply | None) -> dict[str, Any]:
    responses = None if reply is None else {metric.key: reply}
    return dict(metric.score(MetricContext({}, {"output_text": "x"}, responses)))


def answer(text: str) -> EndpointReply:
    return EndpointReply(sample={"output_text": text}, status=200, attempts=1)


def test_score_a_reply() -> None:
    out = scored(judge(), answer('Sure! ```json\n{"quality": 3, "tone": "formal"}\n```'))
    assert out == {"quality": 3.0, "tone": 1.0, "tone.label": "formal", "nan_reason": ""}


def test_score_an_unusable_reply() -> None:
    out = scored(judge(), answer('{"quality": 11, "tone": "angry"}'))
    assert nan(out["quality"]) and nan(out["tone"]) and out["tone.label"] == ""
    assert out["nan_reason"] == (
        "quality: the value is outside [1, 5]; tone: the label is not one of the rubric's labels"
    )


def test_failed_request_fails_the_row_unless_ignored() -> None:
    failed = EndpointReply(
        error="request failed after 4 attempts: HTTP 503",
        error_kind="endpoint",
        status=503,
        attempts=4,
        failure_class="hard_overload",
    )
    with pytest.raises(MetricError, match="the judge request failed: request failed after 4 attempts: HTTP 503"):
        scored(judge(), failed)
    out = scored(judge(ignore_request_failure=True), failed)
    assert nan(out["quality"]) and nan(out["tone"]) and out["tone.label"] == ""
    assert out["nan_reason"] == "the judge request failed (hard_overload, HTTP 503) and was ignored"


def test_a_request_that_could_not_be_built_always_fails_the_row() -> None:
    broken = EndpointReply(error="template 'prompt_template' references ...", error_kind="request")
    with pytest.raises(MetricError, match="references"):
        scored(judge(ignore_request_failure=True), broken)


def test_no_reply_at_all_is_a_clear_error() -> None:
    with pytest.raises(MetricError, match="CallMetricEndpoints"):
        scored(judge(), None)


def test_metric_key_selects_the_reply() -> None:
    metric = resolve(judge().config, "llm-judge_2")
    ctx = MetricContext({}, {}, {"llm-judge": answer('{"quality": 1}'), "llm-judge_2": answer('{"quality": 2}')})
    assert metric.score(ctx)["quality"] == 2.0
