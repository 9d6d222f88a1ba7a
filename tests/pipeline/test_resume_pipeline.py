"""Never pay twice, end to end: kill -9 / Ctrl-C then --resume, a shared store, keys that miss, judge hits.

Real components throughout: the CLI (in-process, or as a subprocess that is killed), Beam's
local runner over real files, HTTP to the project's test server, which counts the requests
it receives per prompt.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from beameval.cache.entry import line_key
from beameval.testserver.harness import PROJECT_ROOT
from pipeline.run import main
from tests.conftest import CliResult

ROWS = 600
PARALLELISM = 4
LATENCY_MS = 20
# Every third row's reference differs from the echoed prompt: exact-match is 0 there, 1 elsewhere.
DATA = [
    {"question": f"question number {i}", "answer": f"question number {i}" if i % 3 else "other"} for i in range(ROWS)
]
EXACT = sum(1 for i in range(ROWS) if i % 3)  # 400


def config_for(path: Path, target: dict[str, Any], **inference: Any) -> dict[str, Any]:
    return {
        "dataset": {"path": str(path)},
        "target": target,
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": PARALLELISM, "max_retries": 1, "inference": {"temperature": 0, **inference}},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


def journaled_keys(output: Path) -> set[str]:
    keys = set()
    for path in (output / "_responses").glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            key = line_key(line)
            if key is not None:
                keys.add(key)
    return keys


def start_run(config: dict[str, Any], output: Path, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    """The CLI as a subprocess in its own process group (so the whole group can be signalled)."""
    config_path = tmp_path / "killed.yaml"
    config_path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "pipeline.run", "--config", str(config_path), "--output", str(output)]
    return subprocess.Popen(
        [*command, "--progress_interval", "0", *extra],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def interrupt_halfway(server, process: subprocess.Popen[str], sig: signal.Signals) -> dict[str, Any]:
    """Signal the run's process group once the server has answered about half of the rows."""
    deadline = time.monotonic() + 120
    while server.stats()["by_status"].get("200", 0) < ROWS // 2:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run never got halfway"
        time.sleep(0.01)  # polling a real subprocess: there is no clock to inject
    os.killpg(process.pid, sig)
    return server.stats()


def expected_scores(result) -> None:
    em = result.score("exact-match.exact-match")
    assert (em["count"], em["nan_count"], em["sum"], em["mean"]) == (ROWS, 0, EXACT, EXACT / ROWS)


def comparable_rows(result) -> list[tuple[Any, ...]]:
    return [
        (r["row_index"], r["status"], r["item"], r["output_text"], r["exact-match.exact-match"]) for r in result.rows
    ]


@pytest.fixture(scope="module")
def clean_run(server, tmp_path_factory) -> tuple[dict[str, Any], CliResult]:
    """One uninterrupted run of the 600 rows: what both interrupted runs must end equal to."""
    server.reset(config=True)
    root = tmp_path_factory.mktemp("clean")
    data = root / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in DATA))
    config = config_for(data, {"model": {"url": server.base_url, "name": "test-model", "format": "openai"}})
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    code = main(["--config", str(root / "config.yaml"), "--output", str(root / "out"), "--progress_interval", "0"])
    assert code == 0
    outputs = CliResult(code, "", "", root / "out")  # the outputs as run_eval gives them
    expected_scores(outputs)
    return config, outputs


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "sigint"])
def test_an_interrupted_run_resumes_paying_only_for_what_was_not_answered(
    sig, clean_run, clean_server, run_eval, tmp_path
):
    config, clean = clean_run
    clean_server.configure(latency_ms=LATENCY_MS)
    output = tmp_path / "interrupted"
    process = start_run(config, output, tmp_path)
    at_signal = interrupt_halfway(clean_server, process, sig)
    _, stderr = process.communicate(timeout=60)
    answered_before = at_signal["by_status"]["200"]
    if sig == signal.SIGINT:
        assert process.returncode == 130, stderr
        assert "--resume" in stderr and "Traceback" not in stderr
    else:
        assert process.returncode == -signal.SIGKILL
    assert not (output / "results.json").exists()
    recorded = journaled_keys(output)

    clean_server.reset()
    resumed = run_eval(config, "--resume", output=output)
    assert resumed.code == 0, resumed.stderr
    sent = clean_server.stats()["requests"]
    in_flight, one_second = PARALLELISM, PARALLELISM * 1000 // LATENCY_MS
    print(f"\n{sig.name}: answered before {answered_before}, recorded {len(recorded)}, resume sent {sent}")
    assert sent == ROWS - len(recorded)  # every recorded response answered, everything else sent once
    assert sent <= ROWS - answered_before + in_flight + one_second
    if sig == signal.SIGINT:  # a clean stop flushes the journal: nothing answered is lost
        assert len(recorded) >= answered_before - in_flight
    assert set(clean_server.stats()["per_prompt"].values()) <= {1}
    # Complete outputs, as if never interrupted: every row once, the clean run's rows and aggregates.
    assert resumed.results["counts"] == clean.results["counts"]
    assert resumed.results["aggregate_scores"] == clean.results["aggregate_scores"]
    assert comparable_rows(resumed) == comparable_rows(clean)
    assert sum(r["cached"] for r in resumed.rows) == len(recorded)
    assert resumed.results["usage"]["cache"] == {"hits": len(recorded), "misses": sent}


TWO_PROCESSES = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")


@pytest.mark.slow
def test_two_local_processes_resume_a_killed_run(clean_run, clean_server, run_eval, tmp_path):
    """Kill -9 a 2-process run at half, resume it with 2 processes: the clean run's outputs, nothing paid twice."""
    config, clean = clean_run
    clean_server.configure(latency_ms=LATENCY_MS)
    output = tmp_path / "killed"
    process = start_run(config, output, tmp_path, *TWO_PROCESSES)
    at_kill = interrupt_halfway(clean_server, process, signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    recorded = journaled_keys(output)
    # The shards' writers: the two worker processes (the driver's is its preflight's answer).
    writers = {path.name.split("-")[1] for path in (output / "_responses").glob("*.jsonl")} - {str(process.pid)}

    clean_server.reset()
    resumed = run_eval(config, "--resume", *TWO_PROCESSES, output=output)
    assert resumed.code == 0, resumed.stderr
    sent = clean_server.stats()["requests"]
    # Two workers, each with PARALLELISM in flight and a second's worth of answers unflushed at most.
    in_flight, one_second = 2 * PARALLELISM, 2 * PARALLELISM * 1000 // LATENCY_MS
    assert sent == ROWS - len(recorded)
    assert sent <= ROWS - at_kill["by_status"]["200"] + in_flight + one_second
    assert set(clean_server.stats()["per_prompt"].values()) <= {1}
    assert len(writers) == 2, f"both worker processes answered rows before the kill: {writers}"
    assert resumed.results["counts"] == clean.results["counts"]
    assert resumed.results["aggregate_scores"] == clean.results["aggregate_scores"]
    assert comparable_rows(resumed) == comparable_rows(clean)
    assert resumed.results["usage"]["cache"] == {"hits": len(recorded), "misses": sent}


def test_a_store_answers_a_second_run_and_every_key_input_misses(
    clean_server, server, model_target, write_jsonl, run_eval, tmp_path
):
    rows = DATA[:30]
    data = write_jsonl(rows)
    store = tmp_path / "store"
    config = config_for(data, model_target())
    config["cache"] = {"path": str(store)}
    first = run_eval(config)
    assert first.code == 0, first.stderr
    assert clean_server.stats()["requests"] == 30
    assert first.results["usage"]["cache"] == {"hits": 0, "misses": 30}
    assert not any(r["cached"] for r in first.rows)

    clean_server.reset()
    second = run_eval(config)
    assert second.code == 0, second.stderr
    assert clean_server.stats()["requests"] == 0
    assert second.results["aggregate_scores"] == first.results["aggregate_scores"]
    assert all(r["cached"] and r["attempts"] == 0 for r in second.rows)
    assert [r["output_text"] for r in second.rows] == [r["output_text"] for r in first.rows]
    assert [r["request_hash"] for r in second.rows] == [r["request_hash"] for r in first.rows]
    assert second.results["usage"]["cache"] == {"hits": 30, "misses": 0}
    assert second.results["usage"]["requests"] == 0 and second.results["usage"]["prompt_tokens"] == 0

    # Two key inputs through the whole pipeline; every one of them in test_every_key_input_misses_for_every_row.
    variants = {
        "temperature": config_for(data, model_target(), temperature=0.5),
        "url": config_for(data, {"model": {"url": server.root_url, "name": "test-model"}}),
    }
    for what, variant in variants.items():
        variant["cache"] = {"path": str(store), "mode": "read_only"}
        clean_server.reset()
        result = run_eval(variant)
        assert result.code == 0, result.stderr
        assert clean_server.stats()["requests"] == 30, f"changing {what} must miss for every row"
        assert result.results["usage"]["cache"]["hits"] == 0

    more_metrics = dict(config, metrics=[*config["metrics"], {"type": "f1", "reference": "{{ item.answer }}"}])
    clean_server.reset()
    rescored = run_eval(more_metrics)
    assert clean_server.stats()["requests"] == 0  # a new metric re-scores every row from the store
    assert rescored.score("f1.f1")["count"] == 30

    clean_server.reset()
    uncached = run_eval(config, "--no_cache")
    assert clean_server.stats()["requests"] == 30
    assert uncached.results["usage"]["cache"] == {"hits": 0, "misses": 30}


def test_resume_after_a_completed_run_sends_nothing_and_needs_no_overwrite(
    clean_server, model_target, write_jsonl, run_eval, tmp_path
):
    config = config_for(write_jsonl(DATA[:20]), model_target())
    output = tmp_path / "out"
    first = run_eval(config, output=output)
    assert first.code == 0, first.stderr
    refused = run_eval(config, output=output)
    assert refused.code == 2 and "--resume" in refused.stderr
    clean_server.reset()
    again = run_eval(config, "--resume", output=output)
    assert again.code == 0, again.stderr
    assert clean_server.stats()["requests"] == 0
    assert again.results["aggregate_scores"] == first.results["aggregate_scores"]
    assert len(again.rows) == 20 and all(r["cached"] for r in again.rows)
    overwritten = run_eval(config, "--overwrite", output=output)
    assert overwritten.code == 0 and clean_server.stats()["requests"] == 20  # --overwrite starts over


def test_resume_with_a_changed_prompt_is_refused_naming_what_changed(
    clean_server, model_target, write_jsonl, run_eval, tmp_path
):
    """It used to re-send every request into the same OUT_DIR and replace its outputs (exit 0)."""
    config = config_for(write_jsonl(DATA[:20]), model_target())
    output = tmp_path / "out"
    assert run_eval(config, output=output).code == 0
    before = (output / "results.json").read_bytes()
    clean_server.reset()
    changed = {**config, "prompt_template": {"messages": [{"role": "user", "content": "Q: {{ item.question }}"}]}}
    refused = run_eval(changed, "--resume", output=output)
    assert refused.code == 2, refused.stderr
    assert "--resume of" in refused.stderr and "with a different config: prompt_template" in refused.stderr
    assert "--overwrite" in refused.stderr and "new --output" in refused.stderr
    assert clean_server.stats()["requests"] == 0 and (output / "results.json").read_bytes() == before
    # the budget may change on a resume (and nothing is re-sent)
    budget = {**config, "params": {**config["params"], "budget": {"max_tokens": 100000}}}
    again = run_eval(budget, "--resume", output=output)
    assert again.code == 0, again.stderr
    assert clean_server.stats()["requests"] == 0
    # --overwrite starts a new job with the changed config; its own --resume is then accepted
    assert run_eval(changed, "--overwrite", output=output).code == 0
    assert run_eval(changed, "--resume", output=output).code == 0


JUDGE_RULES = [{"match": "JUDGE:", "reply": '{"confidence": 4}'}]


def test_judge_calls_hit_the_second_time(clean_server, server, model_target, write_jsonl, run_eval, tmp_path):
    clean_server.configure(rules=JUDGE_RULES)
    judge = {
        "type": "llm-judge",
        "model": {"url": server.base_url, "name": "judge", "format": "openai"},
        "prompt_template": {"messages": [{"role": "user", "content": "JUDGE: {{ sample.output_text }}"}]},
        "scores": [{"name": "confidence", "minimum": 1, "maximum": 5}],
    }
    config = config_for(write_jsonl(DATA[:12]), model_target())
    config["metrics"].append(judge)
    config["cache"] = {"path": str(tmp_path / "store")}
    first = run_eval(config)
    assert first.code == 0, first.stderr
    assert clean_server.stats()["requests"] == 24  # 12 target + 12 judge calls
    clean_server.reset()
    second = run_eval(config)
    assert second.code == 0, second.stderr
    assert clean_server.stats()["requests"] == 0
    usage = second.results["usage"]
    assert usage["cache"] == {"hits": 12, "misses": 0}
    assert usage["metric_calls"]["cache"] == {"hits": 12, "misses": 0} and usage["metric_calls"]["requests"] == 0
    confidence = second.score("llm-judge.confidence")
    assert (confidence["count"], confidence["mean"]) == (12, 4.0)
    assert second.results["aggregate_scores"] == first.results["aggregate_scores"]


def test_every_key_input_misses_for_every_row(server, tmp_path):
    """The keys the pipeline's KeyRequests stage computes, for each change README "Resume and caching" names."""
    from beameval.cache.key import prepared_key
    from beameval.config.schema import parse_config
    from beameval.core.prompt import render_prompt
    from beameval.core.records import InputRow
    from beameval.core.templates import Template
    from beameval.inference.targets import make_handler
    from transforms.cache import target_request

    target = {"model": {"url": server.base_url, "name": "test-model", "format": "openai"}}
    data = tmp_path / "d.jsonl"
    configs = {
        "base": config_for(data, target),
        "temperature": config_for(data, target, temperature=0.5),
        "max_tokens": config_for(data, target, max_tokens=17),
        "stop": config_for(data, target, stop=["\n"]),
        "seed": config_for(data, target, seed=3),
        "model name": config_for(data, {"model": {**target["model"], "name": "other-model"}}),
        "url": config_for(data, {"model": {**target["model"], "url": server.root_url}}),
        "nim format": config_for(data, {"model": {**target["model"], "format": "nim"}}),
        "system prompt": {**config_for(data, target), "params": {"system_prompt": "Be brief."}},
    }
    rows = [InputRow(i, row) for i, row in enumerate(DATA[:50])]

    def keys(raw: dict[str, Any], sample_index: int = 0) -> list[str]:
        config = parse_config(raw)
        handler = make_handler(config.target, config.params, None)
        prompt = Template(config.prompt_template, "prompt_template")
        return [
            prepared_key(
                target_request(
                    handler,
                    render_prompt(prompt, InputRow(r.row_index, r.item, sample_index=sample_index)),
                )
            )
            for r in rows
        ]

    base = keys(configs["base"])
    assert len(set(base)) == 50
    for what, raw in configs.items():
        if what != "base":
            assert not set(keys(raw)) & set(base), f"changing {what} must miss for every row"
    assert not set(keys(configs["base"], sample_index=1)) & set(base)  # repeats are their own entries
    with_metric = dict(configs["base"], metrics=[*configs["base"]["metrics"], {"type": "f1", "reference": "x"}])
    assert keys(with_metric) == base  # metrics are not part of the target's key


def test_rows_sent_after_the_target_learned_max_completion_tokens_are_keyed_as_first_built(
    clean_server, model_target, write_jsonl, run_eval, tmp_path
):
    """Keys come from the request as first built, so a rerun (whose handler has not learned yet) hits every row."""
    clean_server.configure(unsupported_params=["max_tokens"])
    config = config_for(write_jsonl(DATA[:40]), model_target(), max_tokens=16)
    config["params"]["parallelism"] = 1  # one at a time: rows 2.. are built after the handler learned
    config["cache"] = {"path": str(tmp_path / "store")}
    first = run_eval(config)
    assert first.code == 0, first.stderr
    by_status = clean_server.stats()["by_status"]
    # The preflight's request is refused once (its handler learns; the workers' start afresh), then requests
    # built before the workers' first refusal came back (up to 2 x parallelism queued) are each refused once.
    assert by_status["200"] == 40 and 2 <= by_status["400"] <= 3
    clean_server.reset()
    second = run_eval(config)
    assert second.code == 0, second.stderr
    assert clean_server.stats()["requests"] == 0
    assert second.results["usage"]["cache"] == {"hits": 40, "misses": 0}
