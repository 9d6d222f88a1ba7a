"""Secrets and sandboxing, end to end through the CLI: the API key comes only from the
environment variable named in ``api_key_env`` and is never written anywhere; dataset text
is data, never a template; templates cannot reach Python internals; credentials cannot be
smuggled in through ``default_headers``; only http(s) endpoints are accepted.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from beameval.testserver.harness import free_port

SECRET = "sk-SECRET-123"
KEY_ENV = "EVAL_TEST_KEY"
INJECTION = "{{ ''.__class__.__mro__ }}"
EM = "exact-match.exact-match"

ROWS = [
    {"question": "hello there", "answer": "hello there"},
    {"question": "what is two", "answer": "two"},
    {"question": "bad request please", "answer": "x"},
    {"question": "service down please", "answer": "x"},
]


@pytest.fixture
def keyed_server(clean_server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    clean_server.configure(
        rules=[{"match": "bad request", "status": 400}, {"match": "service down", "status": 503}],
    )
    return clean_server


def online(server, path: Path, **params: object) -> dict:
    return {
        "dataset": {"path": str(path)},
        "target": {"model": {"url": server.base_url, "name": "m", "format": "openai", "api_key_env": KEY_ENV}},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"max_retries": 1, "request_timeout": 10, **params},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


def every_output_text(output: Path) -> str:
    """Everything the run wrote, decoded: Parquet shards as their rows, every other file as text."""
    assert output.is_dir()
    texts = []
    for path in sorted(p for p in output.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            texts.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
        texts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


def test_api_key_is_sent_from_the_env_var_and_written_nowhere(keyed_server, write_jsonl, run_eval, caplog):
    caplog.set_level(logging.DEBUG)
    result = run_eval(online(keyed_server, write_jsonl(ROWS), ignore_request_failure=True))
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 4, "ok": 2, "errors": 2}
    assert keyed_server.last_request()["headers"]["authorization"] == f"Bearer {SECRET}"
    assert keyed_server.stats()["by_status"].get("400") == 1
    assert [(e["row_index"], e["phase"]) for e in result.errors] == [(2, "sample_generation"), (3, "sample_generation")]
    names = {p.relative_to(result.output).parts[0] for p in result.output.rglob("*") if p.is_file()}
    assert {"results.json", "_summary.json", "rows", "errors"} <= names
    assert result.results["config"]["target"]["model"]["api_key_env"] == KEY_ENV
    written = every_output_text(result.output)
    assert SECRET not in written
    assert SECRET not in result.stdout and SECRET not in result.stderr
    assert SECRET not in caplog.text


def test_strict_failure_message_does_not_contain_the_key(keyed_server, write_jsonl, run_eval):
    result = run_eval(online(keyed_server, write_jsonl(ROWS)))
    assert result.code == 1
    assert "during sample generation on row 2" in result.stderr and "400" in result.stderr
    assert SECRET not in result.stderr and SECRET not in result.stdout
    assert "Traceback" not in result.stderr
    assert SECRET not in every_output_text(result.output)


def test_dataset_text_that_looks_like_a_template_is_sent_as_literal_data(keyed_server, write_jsonl, run_eval):
    result = run_eval(online(keyed_server, write_jsonl([{"question": INJECTION, "answer": INJECTION}])))
    assert result.code == 0, result.stderr
    body = keyed_server.last_request()["body"]
    assert body["messages"] == [{"role": "user", "content": INJECTION}]
    assert result.score(EM)["mean"] == 1.0  # the echoed answer is the same literal text


def test_dataset_text_that_looks_like_a_template_is_data_offline(write_jsonl, run_eval):
    path = write_jsonl([{"answer": INJECTION, "output": INJECTION}, {"answer": "{{ 7 * 7 }}", "output": "49"}])
    config = {
        "dataset": {"path": str(path)},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert [r[EM] for r in result.rows] == [1.0, 0.0]  # "{{ 7 * 7 }}" stayed text, it was not evaluated


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ item.__class__.__init__.__globals__ }}",
        "Q: {{ cycler.__init__.__globals__.os.environ }}",
    ],
)
def test_prompt_template_reaching_python_internals_is_blocked(write_jsonl, run_eval, template):
    config = {
        "dataset": {"path": str(write_jsonl([{"question": "q", "answer": "a"}]))},
        "target": {"model": {"url": f"http://127.0.0.1:{free_port()}/v1", "name": "m", "format": "openai"}},
        "prompt_template": {"messages": [{"role": "user", "content": template}]},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 2
    assert "template 'prompt_template' was blocked by the sandbox: access to attribute" in result.stderr
    assert "is unsafe" in result.stderr and "Traceback" not in result.stderr


def test_metric_template_reaching_python_internals_is_blocked_per_row(write_jsonl, run_eval):
    config = {
        "dataset": {"path": str(write_jsonl([{"answer": "a", "output": "a"}]))},
        "params": {"ignore_request_failure": True, "max_error_rate": 1.0},  # every row fails on purpose
        "metrics": [
            {
                "type": "exact-match",
                "reference": "{{ item.answer.__class__.__mro__[1].__subclasses__() }}",
                "candidate": "{{ item.output }}",
            }
        ],
    }
    result = run_eval(config, "--skip_preflight")
    assert result.code == 0, result.stderr
    [error] = result.errors
    assert error["phase"] == "scoring" and "blocked by the sandbox" in error["error"]


@pytest.mark.parametrize("header", ["Authorization", "X-Api-Key", "x_auth_token", "Cookie"])
def test_credentials_in_default_headers_are_refused(write_jsonl, run_eval, header):
    config = {
        "dataset": {"path": str(write_jsonl([{"question": "q", "answer": "a"}]))},
        "target": {
            "model": {
                "url": f"http://127.0.0.1:{free_port()}/v1",
                "name": "m",
                "default_headers": {header: f"Bearer {SECRET}"},
            }
        },
        "prompt_template": "{{ item.question }}",
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 2
    assert f"'target.model.default_headers': header '{header}' looks like a credential" in result.stderr
    assert "api_key_env" in result.stderr
    assert SECRET not in result.stderr


def test_api_key_value_in_api_key_env_is_refused(write_jsonl, run_eval):
    config = {
        "dataset": {"path": str(write_jsonl([{"question": "q", "answer": "a"}]))},
        "target": {"model": {"url": "http://127.0.0.1:1/v1", "name": "m", "api_key_env": SECRET}},
        "prompt_template": "{{ item.question }}",
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 2
    assert "'target.model.api_key_env': must be the NAME of an environment variable" in result.stderr


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/v1", "127.0.0.1:8000/v1", "http:///v1"])
@pytest.mark.parametrize("where", ["model", "agent", "judge"])
def test_urls_that_are_not_http_are_refused(write_jsonl, run_eval, url, where):
    config = {
        "dataset": {"path": str(write_jsonl([{"question": "q", "answer": "a"}]))},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.answer }}"}],
    }
    if where == "model":
        config |= {"target": {"model": {"url": url, "name": "m"}}, "prompt_template": "{{ item.question }}"}
        key = "target.model.url"
    elif where == "agent":
        config["target"] = {"agent": {"url": url, "body": {"input": "{{ item.question }}"}, "response_path": "$.out"}}
        key = "target.agent.url"
    else:
        judge = {
            "type": "llm-judge",
            "model": {"url": url, "name": "j"},
            "scores": [{"name": "s", "minimum": 0, "maximum": 1}],
        }
        config["metrics"].append(judge)
        key = "metrics.1.model.url"
    result = run_eval(config)
    assert result.code == 2
    assert f"'{key}': must be an http:// or https:// URL with a host, got {url!r}" in result.stderr
    assert "Traceback" not in result.stderr


def test_credentials_in_a_url_are_refused_without_echoing_them(write_jsonl, run_eval):
    url = f"http://user:{SECRET}@127.0.0.1:1/v1"
    config = {
        "dataset": {"path": str(write_jsonl([{"question": "q", "answer": "a"}]))},
        "target": {"model": {"url": url, "name": "m"}},
        "prompt_template": "{{ item.question }}",
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 2
    assert "'target.model.url': must not carry credentials (user:password@host)" in result.stderr
    assert SECRET not in result.stderr + result.stdout and "Traceback" not in result.stderr


def test_a_secret_in_a_group_by_field_is_masked_in_the_group_names(keyed_server, write_jsonl, run_eval):
    """Groups are named from the row as written (masked), never from the row as read."""
    rows = [
        {"question": "hello there", "answer": "hello there", "team": f"team {SECRET}"},
        {"question": "what is two", "answer": "two", "team": "plain"},
    ]
    config = online(keyed_server, write_jsonl(rows))
    config["statistics"] = {"group_by": ["team"]}
    result = run_eval(config)
    assert result.code == 0, result.stderr
    groups = sorted(group["value"] for group in result.results["groups"])
    assert groups == ["plain", "team ***"]
    assert SECRET not in every_output_text(result.output)
