import hashlib

import pytest

from beameval.config import InferenceParams, ModelTarget, Params, ReasoningParams, TargetConfig
from beameval.core.errors import ConfigError, TemplateError
from beameval.inference.errors import EmptyAnswerError, MalformedResponseError
from beameval.inference.prepared import canonical_json, request_hash
from beameval.inference.targets import ModelHandler, make_handler
from beameval.inference.targets.model_request import deep_merge, endpoint_urls
from beameval.inference.targets.model_response import split_reasoning

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def handler(url="http://h:8000/v1", fmt="openai", key=None, headers=None, **params):
    target = TargetConfig(model=ModelTarget(url=url, name="m", format=fmt, default_headers=headers))
    return make_handler(target, Params(**params), key)


def test_factory_builds_a_model_handler():
    assert isinstance(handler(), ModelHandler)


def test_route_is_chosen_by_request_shape():
    h = handler()
    chat = h.prepare(CHAT)
    assert chat.url == "http://h:8000/v1/chat/completions"
    assert chat.body == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    completion = h.prepare("Say hi")
    assert completion.url == "http://h:8000/v1/completions"
    assert completion.body == {"model": "m", "prompt": "Say hi"}
    dict_prompt = h.prepare({"prompt": "x", "n": 1})
    assert dict_prompt.url.endswith("/v1/completions")


def test_rendered_model_key_overrides_the_name_and_input_is_not_mutated():
    rendered = {"model": "other", "messages": [{"role": "user", "content": "hi"}]}
    h = handler(system_prompt="S")
    body = h.prepare(rendered).body
    assert body["model"] == "other"
    assert rendered == {"model": "other", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("url", "chat", "completions"),
    [
        ("http://h/v1", "http://h/v1/chat/completions", "http://h/v1/completions"),
        ("http://h/v1/", "http://h/v1/chat/completions", "http://h/v1/completions"),
        ("http://h/v1/chat/completions", "http://h/v1/chat/completions", "http://h/v1/completions"),
        ("http://h/v1/completions", "http://h/v1/chat/completions", "http://h/v1/completions"),
        (
            "https://h/openai/v1/chat/completions?api-version=2024-06-01",
            "https://h/openai/v1/chat/completions?api-version=2024-06-01",
            "https://h/openai/v1/completions?api-version=2024-06-01",
        ),
        ("http://h/v1?x=1&y=2", "http://h/v1/chat/completions?x=1&y=2", "http://h/v1/completions?x=1&y=2"),
    ],
)
def test_url_forms(url, chat, completions):
    base, chat_url, completions_url = endpoint_urls(url)
    assert (chat_url, completions_url) == (chat, completions)
    assert "?" not in base and not base.endswith("/completions")
    h = handler(url=url)
    assert h.prepare(CHAT).url == chat
    assert h.prepare("p").url == completions


def test_endpoint_key_identifies_without_revealing_the_key():
    a = handler(key="sk-secret-1")
    b = handler(key="sk-secret-2")
    assert a.endpoint_key != b.endpoint_key
    assert "sk-secret" not in a.endpoint_key
    assert a.endpoint_key.startswith("http://h:8000/v1|m|")


def test_headers_bearer_only_with_a_key_and_default_headers_merged():
    without = handler(headers={"X-Team": "eval"})
    assert "Authorization" not in without.headers
    assert without.headers["X-Team"] == "eval"
    with_key = handler(key="abc123")
    assert with_key.headers["Authorization"] == "Bearer abc123"
    assert with_key.secrets == ("abc123",)


def test_nim_default_max_tokens():
    assert handler(fmt="nim").prepare(CHAT).body["max_tokens"] == 4096
    assert handler(fmt="nim").prepare("p").body["max_tokens"] == 4096
    assert "max_tokens" not in handler(fmt="openai").prepare(CHAT).body
    params = {"inference": InferenceParams(max_tokens=10)}
    assert handler(fmt="nim", **params).prepare(CHAT).body["max_tokens"] == 10
    params = {"inference": InferenceParams(max_completion_tokens=10)}
    body = handler(fmt="nim", **params).prepare(CHAT).body
    assert "max_tokens" not in body and body["max_completion_tokens"] == 10
    body = handler(fmt="nim").prepare({**CHAT, "max_completion_tokens": 7}).body
    assert "max_tokens" not in body
    assert handler(fmt="nim").prepare({**CHAT, "max_tokens": 5}).body["max_tokens"] == 5


def test_system_prompt_prefixes_an_existing_system_message():
    h = handler(system_prompt="Be brief.")
    body = h.prepare({"messages": [{"role": "system", "content": "You help."}, {"role": "user", "content": "q"}]}).body
    assert body["messages"] == [{"role": "system", "content": "Be brief. You help."}, {"role": "user", "content": "q"}]


def test_system_prompt_is_inserted_when_there_is_no_system_message():
    body = handler(system_prompt="Be brief.").prepare(CHAT).body
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


def test_system_prompt_prefixes_a_completions_prompt():
    assert handler(system_prompt="Be brief.").prepare("Q: 2+2?").body["prompt"] == "Be brief. Q: 2+2?"


def test_inference_params_deep_merge_with_nested_extra_keys():
    inference = InferenceParams(
        temperature=0,
        seed=7,
        nvext={"top_k": 5, "repetition_penalty": 1.1},
        extra_body={"nvext": {"min_tokens": 2}, "chat_template_kwargs": {"thinking": False}},
    )
    h = handler(fmt="nim", inference=inference, structured_output={"schema": {"type": "object"}})
    body = h.prepare({**CHAT, "temperature": 1.0, "nvext": {"top_k": 1, "priority": 3}}).body
    assert body["temperature"] == 0  # params win over the rendered request
    assert body["seed"] == 7
    assert body["nvext"] == {
        "top_k": 5,
        "priority": 3,
        "repetition_penalty": 1.1,
        "min_tokens": 2,
        "guided_json": {"type": "object"},
    }
    assert body["chat_template_kwargs"] == {"thinking": False}
    assert "extra_body" not in body


def test_deep_merge_is_recursive_and_pure():
    base = {"a": {"b": 1, "c": {"d": 2}}, "x": 1}
    overlay = {"a": {"c": {"e": 3}, "b": 9}, "y": [1]}
    merged = deep_merge(base, overlay)
    assert merged == {"a": {"b": 9, "c": {"d": 2, "e": 3}}, "x": 1, "y": [1]}
    assert base == {"a": {"b": 1, "c": {"d": 2}}, "x": 1}
    merged["y"].append(2)
    assert overlay["y"] == [1]


def test_structured_output_openai():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    body = handler(fmt="openai", structured_output={"schema": schema, "strict": True}).prepare(CHAT).body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "structured_output", "schema": schema, "strict": True},
    }
    body = handler(fmt="openai", structured_output={"schema": schema}).prepare(CHAT).body
    assert body["response_format"]["json_schema"]["strict"] is False


def test_structured_output_nim_is_top_level_nvext():
    schema = {"type": "integer"}
    body = handler(fmt="nim", structured_output={"schema": schema}).prepare(CHAT).body
    assert body["nvext"] == {"guided_json": schema}
    assert "extra_body" not in body and "response_format" not in body


def test_structured_output_validation():
    with pytest.raises(ConfigError):
        handler(structured_output={"name": "x"})
    with pytest.raises(ConfigError):
        handler(structured_output={"schema": {"type": "no-such-type"}})


def test_prompt_of_the_wrong_shape_is_a_template_error():
    with pytest.raises(TemplateError):
        handler().prepare(["a", "b"])


def chat_reply(content, **message):
    return {"choices": [{"message": {"role": "assistant", "content": content, **message}, "finish_reason": "stop"}]}


def test_reasoning_split_at_last_token():
    assert split_reasoning("a</think>b</think>c", "</think>") == ("a</think>b</think>", "c")
    assert split_reasoning("no token", "</think>") == (None, "no token")
    h = handler(reasoning=ReasoningParams(end_token="</think>"))
    reply = chat_reply("<think>x</think>y</think>\nParis")
    sample = h.parse(200, reply)
    assert sample["output_text"] == "\nParis"
    assert sample["reasoning_content"] == "<think>x</think>y</think>"
    assert sample["response"]["choices"][0]["message"]["content"] == "\nParis"
    completion = h.parse(200, {"choices": [{"text": "r</think>ans"}]})
    assert (completion["output_text"], completion["reasoning_content"]) == ("ans", "r</think>")


def test_without_end_token_think_tags_stay():
    assert handler().parse(200, chat_reply("<think>x</think>y"))["output_text"] == "<think>x</think>y"


def test_message_level_reasoning_is_copied_to_the_sample():
    sample = handler().parse(200, chat_reply("42", reasoning_content="thinking..."))
    assert sample["reasoning_content"] == "thinking..."
    sample = handler().parse(200, chat_reply("42", reasoning="hmm"))
    assert sample["reasoning_content"] == "hmm"


def test_output_extraction_rules():
    h = handler()
    assert h.parse(200, chat_reply("hello"))["output_text"] == "hello"
    assert h.parse(200, {"choices": [{"text": "t"}]})["output_text"] == "t"
    both = {"choices": [{"message": {"content": "m"}, "text": "t"}]}
    assert h.parse(200, both)["output_text"] == "m"
    parts = chat_reply([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    assert h.parse(200, parts)["output_text"] == "ab"
    usage = {**chat_reply("x"), "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
    assert h.parse(200, usage)["usage"] == {"prompt_tokens": 3, "completion_tokens": 1}
    assert "usage" not in h.parse(200, chat_reply("x"))


@pytest.mark.parametrize(
    "reply",
    [{}, {"choices": []}, {"choices": None}, {"choices": [{}]}, {"choices": ["x"]}, [], "text", {"id": "x"}],
)
def test_replies_without_choices_are_malformed(reply):
    with pytest.raises(MalformedResponseError):
        handler().parse(200, reply)


@pytest.mark.parametrize("content", [None, ""])
def test_empty_answer_is_a_non_retryable_failure(content):
    with pytest.raises(EmptyAnswerError, match="the model returned an empty answer"):
        handler().parse(200, chat_reply(content))
    with pytest.raises(EmptyAnswerError):
        handler().parse(200, {"choices": [{"text": content}]})


def test_empty_answer_after_reasoning_split_and_length_hint():
    h = handler(reasoning=ReasoningParams(end_token="</think>"))
    with pytest.raises(EmptyAnswerError):
        h.parse(200, chat_reply("<think>long</think>"))
    reply = {"choices": [{"message": {"content": None}, "finish_reason": "length"}]}
    with pytest.raises(EmptyAnswerError, match="max_tokens"):
        handler().parse(200, reply)


def test_tool_call_only_reply_is_an_answer():
    calls = [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    sample = handler().parse(200, chat_reply(None, tool_calls=calls))
    assert sample["output_text"] == ""
    assert sample["response"]["choices"][0]["message"]["tool_calls"] == calls


def test_request_hash_is_stable_and_ignores_headers():
    a = handler(key="k1").prepare({"messages": [{"role": "user", "content": "hi"}], "temperature": 0})
    b = handler(key="k2", headers={"X-A": "1"}).prepare(
        {"temperature": 0, "messages": [{"content": "hi", "role": "user"}]}
    )
    assert a.headers != b.headers
    assert request_hash(a) == request_hash(b)
    assert len(request_hash(a)) == 64
    assert request_hash(a) == hashlib.sha256(canonical_json([a.url, a.body])).hexdigest()
    c = handler().prepare({"messages": [{"role": "user", "content": "hi"}], "temperature": 1})
    assert request_hash(c) != request_hash(a)
