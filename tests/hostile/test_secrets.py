"""No configured secret (the API key) is written anywhere, even when a gateway echoes it; header values are data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from beameval.core.redaction import Redactor, redact_text, redact_url, redact_urls
from beameval.inference.classify import classify

KEY = "hk-0123456789abcdefghijklmnop"  # 28 characters, not a well-known key shape: only literal masking catches it
HEADER_VALUE = "hdr-routing-value-2718281828"  # a default header's value: not a secret, kept as it is
PROMPT = {"messages": [{"role": "user", "content": "{{ item.question }}"}]}


def _fragments(secret: str, size: int = 10) -> set[str]:
    return {secret[i : i + size] for i in range(len(secret) - size + 1)}


def _decoded_texts(out: Path) -> list[tuple[Path, str]]:
    """Every file of OUT_DIR as raw text, and Parquet / gzip / JSON files also as their decoded content."""
    texts = []
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        texts.append((path, raw.decode("latin-1")))
        if path.suffix == ".parquet":
            texts.append((path, json.dumps(pq.read_table(path).to_pylist(), ensure_ascii=False, default=str)))
        elif path.suffix == ".gz":
            texts.append((path, gzip.decompress(raw).decode("utf-8", "replace")))
        elif path.suffix in (".json", ".jsonl"):
            for line in raw.decode("utf-8").splitlines() or [""]:
                if line.strip():
                    try:
                        texts.append((path, json.dumps(json.loads(line), ensure_ascii=False)))
                    except json.JSONDecodeError:
                        pass
            if path.suffix == ".json":
                texts.append((path, json.dumps(json.loads(raw), ensure_ascii=False)))
    return texts


@pytest.mark.slow
def test_no_secret_reaches_any_output_file(write_jsonl, hostile, hostile_target, run_eval, monkeypatch):
    monkeypatch.setenv("HOSTILE_KEY", KEY)
    # A gateway that reflects the request headers into the answer.
    hostile.script["ECHO"] = lambda headers, _p: (200, {}, hostile.chat_body(json.dumps(json.dumps(headers))))
    # A 400 whose body puts the key right across the 200-character excerpt cut.
    hostile.script["STRADDLE"] = lambda headers, _p: (400, {}, ("x" * 185 + KEY + " tail").encode())
    hostile.script["HEADER"] = lambda headers, _p: (400, {}, f"bad header X-Api: {HEADER_VALUE}".encode())
    data = write_jsonl([{"question": q, "answer": q} for q in ("ECHO me", "STRADDLE", "HEADER", "plain")])
    config = {
        "dataset": {"path": str(data)},
        "target": hostile_target(api_key_env="HOSTILE_KEY", default_headers={"X-Api": HEADER_VALUE}),
        "prompt_template": PROMPT,
        "params": {"ignore_request_failure": True, "max_retries": 0},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    rows = result.rows
    assert [r["status"] for r in rows] == ["ok", "error", "error", "ok"]
    echoed = json.loads(rows[0]["output_text"])
    assert echoed["Authorization"] == "Bearer ***" and echoed["X-Api"] == HEADER_VALUE  # the key masked, data kept
    assert "HTTP 400" in rows[1]["error"] and "***" in rows[1]["error"]
    assert "HTTP 400" in rows[2]["error"] and HEADER_VALUE in rows[2]["error"]
    for path, text in _decoded_texts(result.output):  # the response journal (_responses/) included
        leaked = [fragment for fragment in _fragments(KEY, 8) if fragment in text]
        assert not leaked, f"{path} holds part of a secret: {leaked[:3]}"
    assert KEY not in result.stdout + result.stderr


def test_the_excerpt_is_cut_after_redaction():
    body = ("x" * 185 + KEY + " more text").encode()
    failure = classify(400, url="http://h/v1/chat/completions", body=body, secrets=[KEY])
    assert not any(fragment in failure.message for fragment in _fragments(KEY, 6))
    assert "***" in failure.message


def test_redactor_masks_text_bytes_and_values():
    redactor = Redactor([KEY, HEADER_VALUE, "", "ab", None])
    assert set(redactor.secrets) == {HEADER_VALUE, KEY}  # empty and too-short values are ignored
    assert redactor.text(f"key={KEY}") == "key=***"
    assert redactor.bytes(json.dumps({"k": KEY}).encode()) == b'{"k": "***"}'
    value = {"a": [f"x {HEADER_VALUE}", 1], KEY: None}
    assert redactor.value(value) == {"a": ["x ***", 1], "***": None}
    clean = {"a": ["fine"]}
    assert redactor.value(clean) is clean
    assert redact_text("Authorization: Bearer abc.def") == "Authorization: Bearer ***"  # messages about HTTP bodies


def test_redactor_masks_slices_of_eight_or_more_and_nothing_that_only_looks_like_a_key():
    redactor = Redactor([KEY])
    assert redactor.text(f"half: {KEY[3:11]} end") == "half: *** end"  # 8 characters of the key
    assert redactor.text(f"seven: {KEY[3:10]} end") == f"seven: {KEY[3:10]} end"  # 7: too short to tell
    assert redactor.text(f"{KEY[:12]} and {KEY[-9:]}") == "*** and ***"
    assert redactor.text(f"x{KEY}y") == "x***y"
    for data in ("Bearer zyx987wvu654", "sk-zyxwvutsrqponm9876", "nvapi-9876543210", "true"):
        assert redactor.text(data) is data
    assert redactor.bytes(f'{{"k": "{KEY[4:16]}"}}'.encode()) == b'{"k": "***"}'
    assert Redactor().text("Bearer abc123def456") == "Bearer abc123def456"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://u:p@h.example/v1", "https://h.example/v1"),
        ("https://h/v1?api-key=SECRET&api-version=1", "https://h/v1?api-key=***&api-version=1"),
        ("https://h/v1?code=SECRET", "https://h/v1?code=***"),
        ("https://h/v1?sig=SECRET&sv=2020", "https://h/v1?sig=***&sv=2020"),
        ("https://h/v1", "https://h/v1"),
        ("https://h/v1?hmac=SECRET&v=1", "https://h/v1?hmac=***&v=1"),
        ("https://h/v1#key=SECRET", "https://h/v1#key=***"),
        ("https://h/v1?a=1#access_token=SECRET&state=s", "https://h/v1?a=1#access_token=***&state=s"),
        ("https://h/v1#section-2", "https://h/v1#section-2"),
    ],
)
def test_one_url_redaction(url, expected):
    assert redact_url(url) == expected
    assert redact_urls({"config": [{"url": url}, "not a url ?key=x"]}) == {
        "config": [{"url": expected}, "not a url ?key=x"]
    }
