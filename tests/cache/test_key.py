"""The response key: every part of the request as sent changes it, headers too; credentials and dict order do not."""

from __future__ import annotations

import hashlib
import json

import pytest

from beameval.cache.key import KEY_VERSION, normalize_url, prepared_key, response_key, response_key_from_content
from beameval.config import ModelTarget, Params
from beameval.inference.prepared import PreparedRequest
from beameval.inference.targets.model import ModelHandler

URL = "http://127.0.0.1:8000/v1/chat/completions"
BODY = {
    "model": "m",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}],
    "temperature": 0.0,
    "top_p": 1.0,
    "max_tokens": 64,
    "stop": ["\n"],
    "seed": 7,
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "tool_choice": "auto",
    "response_format": {"type": "json_object"},
    "nvext": {"top_k": 5},
}


def test_the_key_is_sha256_of_the_canonical_payload_written_out():
    expected_bytes = json.dumps(
        ["beameval-response", KEY_VERSION, URL, BODY, 0, []], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()
    assert KEY_VERSION == 2  # version 2 added the headers: a version-1 store misses
    assert response_key(URL, BODY) == hashlib.sha256(expected_bytes).hexdigest()
    headers = {"X-Deployment": "blue", "Authorization": "Bearer k", "Content-Type": "application/json"}
    with_headers = json.dumps(
        [
            "beameval-response",
            KEY_VERSION,
            URL,
            BODY,
            0,
            [["content-type", "application/json"], ["x-deployment", "blue"]],
        ],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    assert response_key(URL, BODY, headers=headers) == hashlib.sha256(with_headers).hexdigest()


@pytest.mark.parametrize(
    "change",
    [
        {"model": "m2"},
        {"messages": [{"role": "user", "content": "2+3?"}]},
        {"messages": [{"role": "system", "content": "be long"}, {"role": "user", "content": "2+2?"}]},
        {"temperature": 0.7},
        {"top_p": 0.9},
        {"max_tokens": 65},
        {"stop": ["\n\n"]},
        {"seed": 8},
        {"tools": []},
        {"tool_choice": "none"},
        {"response_format": {"type": "text"}},
        {"nvext": {"top_k": 6}},
        {"extra_key": True},
    ],
)
def test_each_body_field_changes_the_key(change):
    assert response_key(URL, {**BODY, **change}) != response_key(URL, BODY)


def test_the_sample_index_and_url_change_the_key():
    base = response_key(URL, BODY)
    assert response_key(URL, BODY, 1) != base
    assert response_key("http://127.0.0.1:8001/v1/chat/completions", BODY) != base
    assert response_key("http://127.0.0.1:8000/v1/completions", BODY) != base
    assert response_key("https://127.0.0.1:8000/v1/chat/completions", BODY) != base
    assert response_key(URL + "?api-version=2024", BODY) != base


def test_dict_order_does_not_change_the_key():
    reordered = dict(reversed(list(BODY.items())))
    reordered["messages"] = [dict(reversed(list(m.items()))) for m in BODY["messages"]]
    assert response_key(URL, reordered) == response_key(URL, BODY)


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("HTTP://Example.COM:80/V1/Chat", "http://example.com/V1/Chat"),
        ("https://example.com:443/v1", "https://example.com/v1"),
        ("https://example.com:8443/v1", "https://example.com:8443/v1"),
        ("http://user:pw@example.com/v1#frag", "http://example.com/v1"),
        ("http://[::1]:8000/v1?x=1", "http://[::1]:8000/v1?x=1"),
    ],
)
def test_url_normalisation(raw, normal):
    assert normalize_url(raw) == normal


def test_equivalent_urls_share_a_key():
    assert response_key("HTTP://127.0.0.1:80/v1/x", BODY) == response_key("http://127.0.0.1/v1/x", BODY)


def test_api_keys_never_change_the_key_and_other_headers_do():
    target = ModelTarget(url="http://127.0.0.1:8000/v1", name="m")
    params = Params(inference={"temperature": 0})
    request = {"messages": [{"role": "user", "content": "hi"}]}
    with_key = ModelHandler(target, params, "sk-secret-1").prepare(request)
    other_key = ModelHandler(target, params, "sk-secret-2").prepare(request)
    no_key = ModelHandler(target, params, None).prepare(request)
    assert with_key.headers != no_key.headers
    assert prepared_key(with_key) == prepared_key(other_key) == prepared_key(no_key)
    # A key sent in a header of any name is left out, given the endpoint's secrets.
    custom = ModelTarget(url="http://127.0.0.1:8000/v1", name="m", api_key_header="X-Goog-Token")
    custom_handler = ModelHandler(custom, params, "secret-value-123")
    assert custom_handler.prepare(request).headers["X-Goog-Token"] == "secret-value-123"
    assert prepared_key(custom_handler.prepare(request), secrets=custom_handler.secrets) == prepared_key(no_key)
    for name in ("Authorization", "api-key", "X-API-Key", "Cookie"):
        assert response_key(URL, BODY, headers={name: "anything"}) == response_key(URL, BODY)
    # A header that routes the request (blue/green) selects its own answer.
    blue = ModelHandler(target.model_copy(update={"default_headers": {"X-Deployment": "blue"}}), params, "k")
    green = ModelHandler(target.model_copy(update={"default_headers": {"X-Deployment": "green"}}), params, "k")
    keys = {prepared_key(h.prepare(request), secrets=h.secrets) for h in (blue, green)} | {prepared_key(no_key)}
    assert len(keys) == 3
    assert response_key(URL, BODY, headers={"X-Deployment": "blue"}) == response_key(
        URL, BODY, headers={"x-deployment": "blue"}
    )  # header names are case-insensitive


def test_prepared_key_uses_the_sample_index():
    prepared = PreparedRequest(URL, BODY, {"Authorization": "Bearer x"}, sample_index=2)  # a credential: left out
    assert prepared_key(prepared) == response_key(URL, BODY, 2)
    assert prepared_key(prepared, 0) == response_key(URL, BODY, 0)


def test_the_nim_max_tokens_default_and_system_prompt_are_in_the_key():
    nim = ModelTarget(url="http://127.0.0.1:8000/v1", name="m", format="nim")
    openai = ModelTarget(url="http://127.0.0.1:8000/v1", name="m", format="openai")
    request = {"messages": [{"role": "user", "content": "hi"}]}
    nim_prepared = ModelHandler(nim, Params(), None).prepare(request)
    assert nim_prepared.body["max_tokens"] == 4096
    assert prepared_key(nim_prepared) != prepared_key(ModelHandler(openai, Params(), None).prepare(request))
    with_system = ModelHandler(openai, Params(system_prompt="S"), None).prepare(request)
    assert prepared_key(with_system) != prepared_key(ModelHandler(openai, Params(), None).prepare(request))


@pytest.mark.parametrize(
    "url, body, sample_index",
    [
        ("http://h:8000/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "q"}]}, 0),
        ("HTTPS://Example.COM:443/v1/completions?x=1", {"prompt": "é ✓ \u2028", "stop": ["\n"], "seed": 7}, 3),
        ("http://[::1]:9/v1", {"z": [1.5, None, True], "a": {"b": {}}}, 12),
    ],
)
def test_the_key_from_the_wire_bytes_equals_the_key_from_the_body(url, body, sample_index):
    # The engine keys the bytes it sends; a reader of the store keys the body. Both must agree,
    # byte for byte, with the definition written out in the first test of this file.
    content = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    expected = response_key(url, body, sample_index)
    assert response_key_from_content(url, content, sample_index) == expected
    prepared = PreparedRequest(url, body, {}, sample_index, content=content)
    assert prepared_key(prepared) == expected
    assert prepared == PreparedRequest(url, body, {}, sample_index)  # the cached bytes are not part of equality


def _written_out_key(url: str, body: object, sample_index: int, headers: dict[str, str]) -> bytes:
    """The key's definition from the module docstring, with nothing made once or cached."""
    kept = sorted([name.lower(), value] for name, value in headers.items() if name.lower() != "authorization")
    payload = ["beameval-response", KEY_VERSION, normalize_url(url), body, sample_index, kept]
    written = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(written.encode()).digest()


def test_keys_and_hashes_made_around_the_body_equal_the_written_out_definition_whatever_comes_in_turn():
    """The parts before and after the body are made once per URL, index and headers: switching between them, and
    bodies of any text (JSON escapes, control and non-BMP characters, line separators), changes nothing."""
    from beameval.cache.key import response_digest
    from beameval.inference.prepared import canonical_json, request_hash_from_bytes

    urls = ["http://h:8000/v1/chat/completions", "HTTPS://Ex.COM:443/v1/x?q=é", 'http://h/"quoted"\\path']
    header_sets = [{}, {"X-Deployment": "blue", "Authorization": "Bearer k"}, {"x-é": "✓ \u2028", "A": '\x00"'}]
    texts = ["q", "é ✓ \u2028\u2029", "😀 \U0010ffff", '"\\/\b\f\n\r\t\x01\x7f', "", "\ufeff<script>"]
    checked = 0
    for round_ in range(2):
        for i, text in enumerate(texts):
            for url in urls:
                for headers in header_sets:
                    body = {"model": "m", "messages": [{"role": "user", "content": text}], "n": [i, 1.5, None, True]}
                    index = (i + round_) % 3
                    content = canonical_json(body)
                    expected = _written_out_key(url, body, index, headers)
                    assert response_digest(url, content, index, headers) == expected
                    assert response_key_from_content(url, content, index, headers) == expected.hex()
                    hashed = json.dumps([url, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                    assert request_hash_from_bytes(url, content) == hashlib.sha256(hashed.encode()).hexdigest()
                    checked += 1
    assert checked == 2 * len(texts) * len(urls) * len(header_sets)
