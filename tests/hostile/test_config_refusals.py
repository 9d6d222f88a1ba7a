"""Small but wrong: malformed URLs and headers are refused at config time, exit 2, naming the key."""

from __future__ import annotations

from typing import Any

import pytest

URL = "http://127.0.0.1:8000/v1"
BASE: dict[str, Any] = {
    "dataset": {"path": "data.jsonl"},
    "prompt_template": {"messages": [{"role": "user", "content": "{{ item.q }}"}]},
    "metrics": [{"type": "exact-match", "reference": "{{ item.a }}"}],
}


def _model(**fields: Any) -> dict[str, Any]:
    return {**BASE, "target": {"model": {"url": URL, "name": "m", "format": "openai", **fields}}}


@pytest.mark.parametrize(
    ("config", "key", "words"),
    [
        (_model(default_headers={"X-Team": "a\r\nX-Injected: 1"}), "target.model.default_headers", "CR, LF"),
        (_model(default_headers={"X-Team": "a\nb"}), "target.model.default_headers", "CR, LF"),
        (_model(default_headers={"X-Te\r\nam": "a"}), "target.model.default_headers", "not a valid HTTP header name"),
        (_model(default_headers={"X-Team:": "a"}), "target.model.default_headers", "not a valid HTTP header name"),
        (_model(default_headers={"X\tTeam": "a"}), "target.model.default_headers", "not a valid HTTP header name"),
        (_model(default_headers={"Host": "evil.example"}), "target.model.default_headers", "cannot be overridden"),
        (_model(url="http://127.0.0.1:99999/v1"), "target.model.url", "invalid port"),
        (_model(url="http://127.0.0.1:abc/v1"), "target.model.url", "invalid port"),
        (_model(url="http://127.0.0.1:0/v1"), "target.model.url", "port 0"),
        (_model(url="http://127.0.0.1:8000/v1\r\n/chat"), "target.model.url", "whitespace or control characters"),
        (_model(url="http://127.0.0.1:8000/v1\t"), "target.model.url", "whitespace or control characters"),
        (_model(url="http://127.0.0.1:8000/v1 x"), "target.model.url", "whitespace or control characters"),
        (_model(url=URL + "?api-key=SECRETVALUE"), "target.model.url", "parameter 'api-key'"),
        (_model(url=URL + "?key=SECRETVALUE"), "target.model.url", "parameter 'key'"),
        (_model(url=URL + "?code=SECRETVALUE"), "target.model.url", "parameter 'code'"),
        (_model(url=URL + "?token=SECRETVALUE"), "target.model.url", "parameter 'token'"),
        (_model(url=URL + "?sv=1&sig=SECRETVALUE"), "target.model.url", "parameter 'sig'"),
        (_model(url="http://:8000/v1"), "target.model.url", "with a host"),
    ],
)
def test_malformed_urls_and_headers_are_refused_naming_the_key(run_eval, config, key, words):
    result = run_eval(config)
    assert result.code == 2, result.stderr
    assert key in result.stderr and words in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert "SECRETVALUE" not in result.stderr


@pytest.mark.parametrize("url", [URL, URL + "?api-version=2024-06-01", "https://h.example:443/openai/deployments/d"])
def test_ordinary_urls_are_accepted(url):
    from beameval.core.validators import http_url

    assert http_url(url) == url


def test_ordinary_headers_are_accepted():
    from beameval.core.validators import header_fields

    headers = {"X-Team": "research\tgroup", "OpenAI-Organization": "org-1"}
    assert header_fields(headers) == headers
