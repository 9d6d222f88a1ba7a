"""Hostile leftovers: pasted keys, huge JSON indents, terminal escapes, bad progress intervals, TLS and redirects.

Each is driven through the real part that meets it: the CLI in-process over real files,
the template engine, the preflight against a real TLS server on 127.0.0.1.
"""

from __future__ import annotations

import http.server
import ssl
import threading
import tracemalloc
from collections.abc import Iterator

import pytest
import trustme

from beameval.config import ModelTarget
from beameval.core.console import printable
from beameval.core.errors import TemplateError
from beameval.core.templates import Template
from beameval.inference.classify import classify
from pipeline.run import main

PASTED = {
    "api_key_env": "hf_AbCdEfGh0123456789IjKlMnOpQr",  # shaped like a Hugging Face token, valid as a variable name
    "api_key_secret": "sk-live-0123456789abcdefABCDEF",
}


@pytest.mark.parametrize("field", sorted(PASTED))
def test_a_key_pasted_in_place_of_a_name_is_refused_without_being_printed(field, write_jsonl, run_eval):
    value = PASTED[field]
    config = {
        "dataset": {"path": str(write_jsonl([{"q": "a"}]))},
        "target": {"model": {"url": "http://127.0.0.1:9/v1", "name": "m", field: value}},
        "prompt_template": "{{ item.q }}",
        "metrics": [{"type": "exact-match", "reference": "{{ item.q }}"}],
    }
    result = run_eval(config)
    assert result.code == 2
    assert f"target.model.{field}" in result.stderr
    assert "not repeated here" in result.stderr
    for size in (8, 12):  # not even a part of it
        assert not any(value[i : i + size] in result.stdout + result.stderr for i in range(len(value) - size + 1))


def test_ordinary_variable_names_are_still_accepted():
    for name in ("OPENAI_API_KEY", "NVIDIA_API_KEY_2", "my_key", "AZURE_OPENAI_API_KEY_EASTUS2"):
        assert ModelTarget(url="http://h/v1", name="m", api_key_env=name).api_key_env == name


def test_tojson_with_a_huge_indent_is_refused_before_it_allocates():
    item = {"a": [1, 2, {"b": list(range(10))}], "c": "text"}
    for source in (
        "{{ item | tojson(indent=10**9) }}",
        "{{ item | tojson(10**9) }}",
        "{{ item | tojson(indent=10**7) }}",
    ):
        tracemalloc.start()
        try:
            with pytest.raises(TemplateError) as caught:
                Template(source, "reference").render({"item": item})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert "exceeded its rendering budget" in str(caught.value) and "tojson" in str(caught.value)
        assert peak < 20_000_000, f"{source}: {peak:,} bytes allocated before the refusal"
    assert Template("{{ item | tojson(indent=2) }}", "reference").render({"item": item}) == item


def test_terminal_escape_codes_in_data_never_reach_the_console(write_jsonl, run_eval):
    evil = "\x1b[2J\x1b]0;pwned\x07\u202eevil"
    rows = [{"output": "a", "answer": "a", "cat": evil}, {"output": "b", "answer": "b", "cat": "plain"}]
    config = {
        "dataset": {"path": str(write_jsonl(rows))},
        "statistics": {"group_by": ["cat"]},
        "metrics": [{"type": "exact-match", "candidate": "{{ item.output }}", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    console = result.stdout + result.stderr
    assert not any(c in console for c in "\x1b\x07\u202e")
    assert "cat=\\x1b[2J\\x1b]0;pwned\\x07\\u202eevil" in result.stdout  # visible, not obeyed
    groups = {g["value"] for g in result.results["groups"]}
    assert evil in groups  # the files keep the data as it is


def test_printable_escapes_controls_and_keeps_text():
    assert printable("tab\tand\nnewline, é ✓ 中") == "tab\tand\nnewline, é ✓ 中"
    assert printable("a\x00b\x7fc\x9bd\u2066e") == "a\\x00b\\x7fc\\x9bd\\u2066e"


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "NaN", "1e400"])
def test_progress_interval_must_be_a_finite_number_of_seconds(value, tmp_path, capsys):
    code = main(["--config", "x.yaml", "--output", str(tmp_path / "o"), f"--progress_interval={value}"])
    err = capsys.readouterr().err
    assert code == 2
    assert (
        f"--progress_interval: expected a finite number of seconds, 0 or more (0 turns progress off), got {value!r}"
        in err
    )


@pytest.fixture
def tls_endpoint() -> Iterator[int]:
    """An HTTPS server on 127.0.0.1 whose certificate (for localhost) is signed by a CA nobody trusts."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("localhost", "127.0.0.1").configure_cert(context)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_certificate_that_does_not_verify_is_called_a_certificate_problem(tls_endpoint, write_jsonl, run_eval):
    config = {
        "dataset": {"path": str(write_jsonl([{"q": "a"}]))},
        "target": {"model": {"url": f"https://localhost:{tls_endpoint}/v1", "name": "m", "format": "openai"}},
        "prompt_template": "{{ item.q }}",
        "metrics": [{"type": "exact-match", "reference": "{{ item.q }}"}],
    }
    result = run_eval(config)
    assert result.code == 2
    assert "TLS certificate is not trusted" in result.stderr
    assert "certificate did not verify" in result.stderr and "ca_bundle" in result.stderr
    assert "cannot reach" not in result.stderr and "Start the server" not in result.stderr


def test_a_redirect_names_where_the_endpoint_moved_without_its_key():
    failure = classify(
        301,
        url="http://old.example/v1/chat/completions",
        headers={"location": "https://new.example/v1/chat/completions?api-key=SECRET1234#key=SECRET5678"},
        body=b"moved",
    )
    assert not failure.retryable
    assert "HTTP 301 Moved Permanently" in failure.message
    assert "Location: https://new.example/v1/chat/completions?api-key=***#key=***" in failure.message
    assert "SECRET" not in failure.message
