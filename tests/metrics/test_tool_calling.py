"""tool-calling: name and argument accuracy of OpenAI tool calls, without mutating the input."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

from beameval.core.errors import MetricError, TemplateError

NAMES = "function_name_accuracy"
ARGS = "function_name_and_args_accuracy"


def call(name: str, arguments: Any = None, *, encode: bool = True) -> dict[str, Any]:
    """An OpenAI tool call; dict arguments are JSON-encoded like the API does."""
    if encode and isinstance(arguments, dict):
        arguments = json.dumps(arguments)
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


def response(*calls: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if calls != (None,):
        message["tool_calls"] = list(calls) if calls else None
    return {"id": "r1", "choices": [{"index": 0, "message": message}]}


def expected(*calls: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"function": c["function"]} for c in calls]


@pytest.fixture
def metric(build):
    return build("tool-calling", reference="{{ item.tool_calls }}")


def score(metric, row, gt: list[Any], resp: Any, *, offline: bool = False) -> dict[str, float]:
    if offline:
        return metric.score(row({"tool_calls": gt, "response": resp}))
    return metric.score(row({"tool_calls": gt}, output_text="", response=resp))


def test_outputs(metric) -> None:
    assert metric.output_names() == [NAMES, ARGS]


@pytest.mark.parametrize(
    ("gt", "predicted", "names", "args"),
    [
        ([call("get_weather", {"city": "Paris"})], [call("get_weather", {"city": "Paris"})], 1, 1),
        ([call("get_weather", {"city": "Paris"})], [call("get_weather", {"city": "Rome"})], 1, 0),
        ([call("get_weather", {"city": "Paris"})], [call("get_time", {"city": "Paris"})], 0, 0),
        ([call("Get_Weather", {})], [call("get_weather", {})], 0, 0),  # case-sensitive
        # order is ignored
        ([call("a", {"x": 1}), call("b", {"y": 2})], [call("b", {"y": 2}), call("a", {"x": 1})], 1, 1),
        # a missing or an extra call
        ([call("a", {}), call("b", {})], [call("a", {})], 0, 0),
        ([call("a", {})], [call("a", {}), call("b", {})], 0, 0),
        # key order inside the arguments does not matter; values and types do
        ([call("f", {"a": 1, "b": 2})], [call("f", {"b": 2, "a": 1})], 1, 1),
        ([call("f", {"a": 1})], [call("f", {"a": 1.0})], 1, 1),  # 1 == 1.0 in Python
        ([call("f", {"a": 1})], [call("f", {"a": "1"})], 1, 0),
        ([call("f", {"a": [1, 2]})], [call("f", {"a": [2, 1]})], 1, 0),
        ([call("f", {"s": "naïve café"})], [call("f", {"s": "naïve café"})], 1, 1),
        # None arguments count as {} on both sides
        ([call("f", None)], [call("f", "{}")], 1, 1),
        ([call("f", {})], [call("f", None)], 1, 1),
        ([call("f", {"a": 1})], [call("f", None)], 1, 0),
        # predicted arguments given as an object (offline datasets) are used as they are
        ([call("f", {"a": 1})], [call("f", {"a": 1}, encode=False)], 1, 1),
        # reference arguments may be a JSON string or an object
        ([call("f", '{"a": 1}')], [call("f", {"a": 1})], 1, 1),
        ([call("f", {"a": 1}, encode=False)], [call("f", '{"a": 1}')], 1, 1),
        # nothing expected and nothing called
        ([], [], 1, 1),
        ([call("f", {})], [], 0, 0),
        ([], [call("f", {})], 0, 0),
    ],
)
def test_scores(metric, row, gt, predicted, names, args) -> None:
    assert score(metric, row, gt, response(*predicted)) == {NAMES: names, ARGS: args}


def test_duplicate_names_collapse_to_the_last_occurrence(metric, row) -> None:
    twice = [call("f", {"a": 1}), call("f", {"a": 2})]
    assert score(metric, row, [call("f", {"a": 2})], response(*twice)) == {NAMES: 1, ARGS: 1}
    assert score(metric, row, [call("f", {"a": 1})], response(*twice)) == {NAMES: 1, ARGS: 0}
    assert score(metric, row, twice, response(call("f", {"a": 2}))) == {NAMES: 1, ARGS: 1}
    assert score(metric, row, twice, response(call("f", {"a": 1}))) == {NAMES: 1, ARGS: 0}
    # one expected call, three predicted with the same name: still a name match
    thrice = [call("f", {"a": 2})] * 3
    assert score(metric, row, [call("f", {"a": 2})], response(*thrice)) == {NAMES: 1, ARGS: 1}


@pytest.mark.parametrize("bad", ['{"city": "Paris"', "not json", "{'a': 1}", ""])
def test_malformed_predicted_arguments_give_nan(metric, row, bad: str) -> None:
    result = score(metric, row, [call("f", {"a": 1})], response(call("f", bad)))
    assert result[NAMES] == 1.0
    assert math.isnan(result[ARGS])


def test_malformed_arguments_with_other_names_give_nan(metric, row) -> None:
    # the reference decodes every predicted call first: malformed arguments are NaN whatever the names
    result = score(metric, row, [call("f", {})], response(call("g", "{oops")))
    assert result[NAMES] == 0.0 and math.isnan(result[ARGS])


def test_malformed_arguments_of_a_collapsed_duplicate_give_nan(metric, row) -> None:
    result = score(metric, row, [call("a", {"x": 1})], response(call("a", "{"), call("a", '{"x": 1}')))
    assert result[NAMES] == 1.0 and math.isnan(result[ARGS])


def test_malformed_arguments_anywhere_give_nan(metric, row) -> None:
    predicted = response(call("f", {"a": 1}), call("g", "{oops"))
    result = score(metric, row, [call("f", {"a": 2}), call("g", {})], predicted)
    assert result[NAMES] == 1.0
    assert math.isnan(result[ARGS])


@pytest.mark.parametrize("predicted", [response(), response(None)])
def test_missing_tool_calls_count_as_empty(metric, row, predicted) -> None:
    assert score(metric, row, [], predicted) == {NAMES: 1, ARGS: 1}
    assert score(metric, row, [call("f", {})], predicted) == {NAMES: 0, ARGS: 0}


def test_the_response_is_never_mutated(metric, row) -> None:
    for resp in (
        response(None),  # no tool_calls key: the reference would add one
        response(),  # tool_calls None
        response(call("f", {"a": 1}), call("f", None), call("g", "{oops")),
    ):
        gt = [call("f", None), call("g", '{"b": 2}')]
        item = {"tool_calls": gt, "response": copy.deepcopy(resp)}
        sample = {"output_text": "", "response": resp}
        before = copy.deepcopy((item, sample))
        metric.score(row(item, **sample))
        metric.score(row(item))  # offline path
        assert (item, sample) == before


def test_offline_rows_use_the_item_response(metric, row) -> None:
    gt = [call("f", {"a": 1})]
    assert score(metric, row, gt, response(call("f", {"a": 1})), offline=True) == {NAMES: 1, ARGS: 1}
    # a response the dataset stores as JSON text is decoded
    text = json.dumps(response(call("f", {"a": 1})))
    assert score(metric, row, gt, text, offline=True) == {NAMES: 1, ARGS: 1}


def test_the_sample_response_wins_over_the_item(metric, row) -> None:
    gt = [call("f", {})]
    item = {"tool_calls": gt, "response": response(call("g", {}))}
    result = metric.score(row(item, response=response(call("f", {}))))
    assert result == {NAMES: 1, ARGS: 1}


@pytest.mark.parametrize(
    "resp",
    [{}, {"choices": []}, {"choices": [{"index": 0}]}, {"choices": [{"message": "text"}]}],
)
def test_response_without_a_message_is_an_error(metric, row, resp) -> None:
    with pytest.raises(MetricError, match=r"metric 'tool-calling': the response has no choices\[0\]"):
        score(metric, row, [], resp)


@pytest.mark.parametrize("resp", [None, "not json", 42])
def test_no_response_is_an_error(metric, row, resp) -> None:
    with pytest.raises(MetricError, match="metric 'tool-calling': there is no chat-completion"):
        score(metric, row, [], resp, offline=True)


def test_malformed_predicted_call_is_an_error(metric, row) -> None:
    with pytest.raises(MetricError, match=r"tool_calls\[1\] is not an OpenAI-style tool call"):
        score(metric, row, [], response(call("f"), {"type": "function"}))


@pytest.mark.parametrize(
    "reference",
    [
        "not a list",
        {"function": {"name": "f", "arguments": {}}},
        [{"name": "f", "arguments": {}}],
        [{"function": {"arguments": {}}}],
        [{"function": {"name": 3}}],
        ["f"],
    ],
)
def test_reference_must_be_a_list_of_tool_calls(metric, row, reference) -> None:
    with pytest.raises(
        MetricError,
        match="metric 'tool-calling': the reference must render to a list of OpenAI-style tool calls",
    ):
        score(metric, row, reference, response())


def test_reference_with_malformed_json_arguments_is_an_error(metric, row) -> None:
    with pytest.raises(MetricError, match=r"arguments of reference\[0\] \('f'\) are not valid JSON"):
        score(metric, row, [call("f", "{oops")], response(call("f", {})))


def test_reference_templates(build, row) -> None:
    gt = [call("f", {"a": 1})]
    resp = response(call("f", {"a": 1}))
    # tojson output is decoded back into the list
    metric = build("tool-calling", reference="{{ item.tool_calls | tojson }}")
    assert metric.score(row({"tool_calls": gt}, response=resp)) == {NAMES: 1, ARGS: 1}
    # a constant list in the config
    metric = build("tool-calling", reference=[{"function": {"name": "f", "arguments": {"a": 1}}}])
    assert metric.score(row({}, response=resp)) == {NAMES: 1, ARGS: 1}
    # text around the expression renders a string, which is an error
    metric = build("tool-calling", reference="calls: {{ item.tool_calls }}")
    with pytest.raises(MetricError, match="but it rendered a str"):
        metric.score(row({"tool_calls": gt}, response=resp))
    metric = build("tool-calling", reference="{{ item.missing }}")
    with pytest.raises(TemplateError, match="'missing'"):
        metric.score(row({"tool_calls": gt}, response=resp))


def test_config(build) -> None:
    with pytest.raises(ValidationError, match="reference"):
        build("tool-calling")
    with pytest.raises(ValidationError, match="extra"):
        build("tool-calling", reference="x", candidate="y")
