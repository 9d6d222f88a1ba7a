import pytest

from beameval.config import AgentTarget, Params, TargetConfig
from beameval.core.errors import ConfigError, TemplateError
from beameval.inference.errors import EmptyAnswerError, UnusableResponseError
from beameval.inference.targets import AgentHandler, make_handler


def agent(body=None, response_path="$.output", trajectory_path=None, key=None):
    target = AgentTarget(
        url="http://a:9000/generate?x=1",
        body=body or {"input": "{{ request.prompt }}", "q": "{{ item.question }}"},
        response_path=response_path,
        trajectory_path=trajectory_path,
    )
    return make_handler(TargetConfig(agent=target), Params(), key)


def test_factory_builds_an_agent_handler():
    assert isinstance(agent(), AgentHandler)


def test_body_renders_against_request_and_item_and_posts_to_the_exact_url():
    h = agent(body={"input": "{{ prompt }}", "again": "{{ request.prompt }}", "q": "{{ item.question }}", "k": 1})
    prepared = h.prepare("hello", item={"question": "why?"})
    assert prepared.url == "http://a:9000/generate?x=1"
    assert prepared.body == {"input": "hello", "again": "hello", "q": "why?", "k": 1}
    assert prepared.headers["Content-Type"] == "application/json"
    assert "Authorization" not in prepared.headers


def test_messages_request_and_native_values():
    h = agent(body={"messages": "{{ messages }}", "n": "{{ item.n }}"})
    rendered = {"messages": [{"role": "user", "content": "q"}]}
    body = h.prepare(rendered, item={"n": 3}).body
    assert body == {"messages": [{"role": "user", "content": "q"}], "n": 3}


def test_non_mapping_body_is_wrapped_as_args():
    target = AgentTarget(url="http://a/x", body={"_": 1}, response_path="$.o")
    h = AgentHandler(target, None)
    h.body_template = type(h.body_template)("{{ request.prompt }}", "body")
    assert h.prepare("hi").body == {"args": "hi"}


def test_bearer_key():
    assert agent(key="tok").headers["Authorization"] == "Bearer tok"


def test_answer_is_first_jsonpath_match_stringified():
    h = agent(response_path="$.steps[*].answer")
    sample = h.parse(200, {"steps": [{"answer": 42}, {"answer": "later"}]})
    assert sample["output_text"] == "42"
    assert sample["response"] == {"choices": [{"message": {"role": "assistant", "content": "42"}}]}
    assert "trajectory" not in sample
    assert agent(response_path="$.o").parse(200, {"o": {"a": 1}})["output_text"] == '{"a": 1}'


def test_trajectory_first_match():
    h = agent(trajectory_path="$.trajectory")
    sample = h.parse(200, {"output": "ok", "trajectory": [{"step": 1}]})
    assert sample["trajectory"] == [{"step": 1}]
    assert "trajectory" not in h.parse(200, {"output": "ok"})


def test_no_match_is_fatal_and_names_path_and_excerpt():
    h = agent(response_path="$.answer")
    with pytest.raises(UnusableResponseError) as info:
        h.parse(200, {"result": "x" * 1000})
    message = info.value.message
    assert "$.answer" in message and '{"result": "xxx' in message
    assert len(message) < 320


def test_null_answer_is_empty():
    with pytest.raises(EmptyAnswerError):
        agent().parse(200, {"output": None})


def test_invalid_jsonpath_and_body_template():
    with pytest.raises(ConfigError):
        agent(response_path="$.[[")
    with pytest.raises(TemplateError):
        agent(body={"x": "{{ oops"})
