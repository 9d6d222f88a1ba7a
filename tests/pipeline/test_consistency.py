"""One answer, one path: a resumed, a cached and a 2-process resumed run write the clean run's rows.

The test server scripts the hard cases (a lone surrogate, control characters, a
20,000-character answer, 2^40 and 2^64 token counts, key-like text, a header's value in
the answer, a reply nested too deeply, a slice of the API key); every run's ``rows/``
must equal the clean run's on every column but ``cached``, ``latency_ms`` and
``attempts``, and the clean run's exact-match must be what the replies give when
nothing alters them (computed by hand from the table below).

Real components throughout: the CLI in-process and as a subprocess killed with
SIGKILL, Beam's local runner (one and two processes) over real files, HTTP to the
project's test server.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.test_resume_pipeline import TWO_PROCESSES, start_run

ROWS = 600
API_KEY = "consistency-test-key-7f3a9c2e51d8b046"
KEY_SLICE = API_KEY[5:17]  # 12 characters of the key: a slice that must never be written
HEADER = {"Helicone-Cache-Enabled": "true"}
LONG = " ".join(f"word{i}" for i in range(3000))[:20_000]
DEEP: Any = "bottom"
for _ in range(150):
    DEEP = {"down": DEEP}

#: kind -> (server rule beyond ``match``, the reference, expected exact-match; None: the row fails).
KINDS: dict[str, tuple[dict[str, Any], str | None, float | None]] = {
    "surrogate": ({"reply": "cut \ud83d emoji"}, "cut \ufffd emoji", 1.0),
    "control": ({"reply": "bell\x07 escape\x1b[31m red\x1b[0m nul\x00 end"}, None, 1.0),
    "long": ({"reply": LONG}, LONG, 1.0),
    "tokens40": ({"reply_fields": {"usage": {"prompt_tokens": 2**40, "completion_tokens": 2**40}}}, None, 1.0),
    "tokens64": ({"reply_fields": {"usage": {"prompt_tokens": 2**64, "completion_tokens": 3}}}, None, 1.0),
    "bearer": ({"reply": "Bearer abc123def456"}, "Bearer abc123def456", 1.0),
    "skkey": ({"reply": "sk-abcdefghijklmnop0123"}, "sk-abcdefghijklmnop0123", 1.0),
    "header": ({"reply": "true"}, "true", 1.0),
    "deep": ({"reply_fields": {"extra": DEEP}}, None, None),
    "keyslice": ({"reply": f"the key is {KEY_SLICE} here"}, "unrelated", 0.0),
}
CYCLE = 20  # rows 0..9 of every 20 are the hard cases above, in order; the rest echo their question


def kind_of(index: int) -> str | None:
    kinds = list(KINDS)
    return kinds[index % CYCLE] if index % CYCLE < len(kinds) else None


def dataset() -> list[dict[str, Any]]:
    rows = []
    for i in range(ROWS):
        kind = kind_of(i)
        question = f"{kind.upper()} question {i}" if kind else f"question number {i}"
        if i % CYCLE == CYCLE - 1:
            question += " \ud83d"  # a lone surrogate in the row itself: cleaned and noted on read
        reference = question.replace("\ud83d", "\ufffd")
        if kind is not None:
            rule, scripted, _ = KINDS[kind]
            reference = scripted or rule.get("reply") or reference
        rows.append({"question": question, "answer": reference})
    return rows


def expected_exact_match() -> tuple[int, int, float]:
    """(ok rows, failed rows, exact-match sum), by hand from ``KINDS``."""
    ok = failed = 0
    total = 0.0
    for i in range(ROWS):
        kind = kind_of(i)
        score = KINDS[kind][2] if kind else 1.0
        if score is None:
            failed += 1
        else:
            ok += 1
            total += score
    return ok, failed, total


def rules() -> list[dict[str, Any]]:
    return [{"match": f"{kind.upper()} question", **rule} for kind, (rule, _, _) in KINDS.items()]


def config_for(data: Path, server_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "dataset": {"path": str(data)},
        "target": {
            "model": {
                "url": server_url,
                "name": "test-model",
                "format": "openai",
                "api_key_env": "CONSISTENCY_KEY",
                "default_headers": HEADER,
            }
        },
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, "max_retries": 1, "ignore_request_failure": True},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
        **extra,
    }


IGNORED = ("cached", "latency_ms", "attempts")


def comparable(rows: list[dict[str, Any]]) -> dict[tuple[int, int], str]:
    """Each row (by row and sample index) as canonical JSON, without the columns that may differ."""

    def plain(value: Any) -> Any:
        return "NaN" if isinstance(value, float) and math.isnan(value) else value

    return {
        (row["row_index"], row["sample_index"]): json.dumps(
            {k: plain(v) for k, v in row.items() if k not in IGNORED}, sort_keys=True
        )
        for row in rows
    }


def differing(rows: list[dict[str, Any]], clean: dict[tuple[int, int], str]) -> list[tuple[int, int]]:
    mine = comparable(rows)
    return sorted(key for key in clean.keys() | mine.keys() if clean.get(key) != mine.get(key))


def exact_mean(result) -> float:
    return result.score("exact-match.exact-match")["mean"]


def kill_halfway(server, config: dict[str, Any], output: Path, tmp_path: Path, *extra: str) -> None:
    server.reset()
    process = start_run(config, output, tmp_path, *extra)
    deadline = time.monotonic() + 120
    while server.stats()["by_status"].get("200", 0) < ROWS // 2:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run never got halfway"
        time.sleep(0.01)  # polling a real subprocess: there is no clock to inject
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert not (output / "results.json").exists()


def written_text(output: Path) -> str:
    """Everything a run wrote that is text or JSON lines (journal, errors, results, report)."""
    parts = []
    for path in output.rglob("*"):
        if path.is_file() and path.suffix in (".jsonl", ".json", ".html", ".txt"):
            parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)


@pytest.mark.slow
def test_resumed_cached_and_two_process_runs_write_the_clean_runs_rows(
    clean_server, run_eval, write_jsonl, tmp_path, monkeypatch
):
    monkeypatch.setenv("CONSISTENCY_KEY", API_KEY)
    clean_server.configure(rules=rules(), api_key=API_KEY, latency_ms=10)
    data = write_jsonl(dataset())
    config = config_for(data, clean_server.base_url)

    clean = run_eval(config)
    assert clean.code == 0, clean.stderr
    reference = comparable(clean.rows)

    runs: dict[str, Any] = {}
    killed = tmp_path / "killed"
    kill_halfway(clean_server, config, killed, tmp_path)
    runs["kill -9 + --resume"] = run_eval(config, "--resume", output=killed)

    stored = dict(config, cache={"path": str(tmp_path / "store")})
    clean_server.reset()
    runs["store: first run"] = run_eval(stored)
    clean_server.reset()
    runs["store: cached rerun"] = run_eval(stored)
    assert clean_server.stats()["requests"] == 0  # every answer from the store

    killed2 = tmp_path / "killed2"
    kill_halfway(clean_server, config, killed2, tmp_path, *TWO_PROCESSES)
    runs["2 processes: kill -9 + --resume"] = run_eval(config, "--resume", *TWO_PROCESSES, output=killed2)

    report = {"clean": (0, exact_mean(clean))}
    for name, result in runs.items():
        assert result.code == 0, f"{name}: {result.stderr[-3000:]}"
        report[name] = (len(differing(result.rows, reference)), exact_mean(result))
    print("\nrun: rows that differ from the clean run, exact-match mean")
    for name, (count, mean) in report.items():
        print(f"  {name}: {count} rows differ, exact-match mean {mean:.4f}")

    ok, failed, total = expected_exact_match()
    print(f"  expected (by hand): exact-match mean {total / ok:.4f}")
    em = clean.score("exact-match.exact-match")
    assert (clean.results["counts"]["ok"], clean.results["counts"]["errors"]) == (ok, failed)
    assert (em["count"], em["nan_count"], em["sum"]) == (ok, failed, total)
    for name, result in runs.items():
        assert differing(result.rows, reference) == [], name
        assert result.results["aggregate_scores"] == clean.results["aggregate_scores"], name
        assert result.results["counts"] == clean.results["counts"], name
    assert any(r["cached"] for r in runs["kill -9 + --resume"].rows)
    assert all(r["cached"] for r in runs["store: cached rerun"].rows if r["status"] == "ok")

    # Key-like text is data: written as received; a slice of the configured key is not.
    by_index = {r["row_index"]: r for r in clean.rows}
    kinds = list(KINDS)
    assert by_index[kinds.index("bearer")]["output_text"] == "Bearer abc123def456"
    assert by_index[kinds.index("header")]["output_text"] == "true"
    assert by_index[kinds.index("tokens40")]["prompt_tokens"] == 2**40
    assert by_index[kinds.index("tokens64")]["prompt_tokens"] is None
    assert "outside the 64-bit range" in by_index[kinds.index("tokens64")]["notes"]
    assert "nested more than 100 levels" in by_index[kinds.index("deep")]["error"]
    assert by_index[kinds.index("keyslice")]["output_text"] == "the key is *** here"
    for result in (clean, *runs.values()):
        assert not any(KEY_SLICE in json.dumps(r) for r in result.rows)
        assert KEY_SLICE not in written_text(result.output)
    assert KEY_SLICE not in written_text(tmp_path / "store")


def test_a_deployment_header_selects_its_own_answers_and_the_key_does_not(
    clean_server, run_eval, write_jsonl, tmp_path, monkeypatch
):
    """Blue/green by header: the green run is not answered from the blue run's store; a new API key still hits."""
    data = write_jsonl([{"question": f"question number {i}", "answer": f"question number {i}"} for i in range(8)])
    store = {"path": str(tmp_path / "store")}

    def run(deployment: str, key: str) -> int:
        monkeypatch.setenv("CONSISTENCY_KEY", key)
        config = config_for(data, clean_server.base_url, cache=store)
        config["target"]["model"]["default_headers"] = {"X-Deployment": deployment}
        clean_server.reset()
        result = run_eval(config)
        assert result.code == 0, result.stderr
        return clean_server.stats()["requests"]

    assert run("blue", "first-key-0123456789") == 8
    assert run("blue", "second-key-9876543210") == 0  # the key is never part of the response key
    assert run("green", "first-key-0123456789") == 8
    assert run("green", "second-key-9876543210") == 0
