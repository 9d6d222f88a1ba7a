"""Several targets in one run, end to end: three test-server instances answering differently.

Each instance is one target. The run must send each prompt to each instance once, leave in
``targets/NAME/`` exactly what a single-target run of that target writes, copy those numbers
into the leaderboard, and compare each candidate with the baseline as ``pipeline.compare``
does, except that Holm spans every comparison. Expected p-values come from scipy directly.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy import stats

from beameval.cache.entry import line_key
from beameval.testserver.harness import PROJECT_ROOT, ServerProcess
from pipeline.compare import main as compare_main
from pipeline.run import main as run_main
from tests.conftest import CliResult

pytestmark = pytest.mark.slow

N = 100
#: Rows each candidate gets wrong (the baseline answers every row right).
WRONG = {"base": set(), "small": set(range(6)), "tiny": set(range(10, 14))}
EM = "exact-match.exact-match"


def _question(i: int) -> str:
    return f"item {i:03d} ?"


def _rules(name: str) -> list[dict[str, str]]:
    return [{"match": _question(i), "reply": "zzz" if i in WRONG[name] else f"a{i}"} for i in range(N)]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ServerProcess]]:
    processes = {name: ServerProcess(rules=_rules(name)) for name in WRONG}
    with contextlib.ExitStack() as running:  # each server stops however the module ends
        yield {name: running.enter_context(process) for name, process in processes.items()}


def _model(server: ServerProcess) -> dict[str, Any]:
    return {"url": server.base_url, "name": "test-model", "format": "openai"}


def _base_config(data: Path) -> dict[str, Any]:
    return {
        "dataset": {"path": str(data)},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, "max_retries": 1, "inference": {"temperature": 0}},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


def _multi_config(data: Path, servers: dict[str, ServerProcess], names: list[str] | None = None) -> dict[str, Any]:
    names = names or list(WRONG)
    return {**_base_config(data), "targets": [{"name": n, "model": _model(servers[n])} for n in names]}


def _run(config: dict[str, Any], out: Path, *extra: str) -> int:
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return run_main(["--config", str(path), "--output", str(out), "--progress_interval", "0", *extra])


def _rows(result: CliResult) -> list[dict[str, Any]]:
    volatile = ("latency_ms", "cached", "attempts")
    return [{k: v for k, v in row.items() if k not in volatile} for row in result.rows]


@pytest.fixture(scope="module")
def runs(servers, tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("multi")
    data = tmp / "data.jsonl"
    data.write_text("".join(json.dumps({"question": _question(i), "answer": f"a{i}"}) + "\n" for i in range(N)))
    for server in servers.values():
        server.reset()
    assert _run(_multi_config(data, servers), tmp / "multi") == 0
    sent = {name: server.stats() for name, server in servers.items()}
    singles = {}
    for name, server in servers.items():
        assert _run({**_base_config(data), "target": {"model": _model(server)}}, tmp / f"single_{name}") == 0
        singles[name] = CliResult(0, "", "", tmp / f"single_{name}")
    return {"tmp": tmp, "data": data, "out": tmp / "multi", "sent": sent, "singles": singles}


def test_each_instance_receives_each_prompt_exactly_once(runs) -> None:
    for stats_of in runs["sent"].values():
        assert stats_of["requests"] == N
        assert sorted(stats_of["per_prompt"].values()) == [1] * N


def test_each_target_directory_equals_a_single_target_run(runs) -> None:
    for name, single in runs["singles"].items():
        target = CliResult(0, "", "", runs["out"] / "targets" / name)
        for entry in ("results.json", "rows", "errors", "report.html", "_responses"):
            assert (target.output / entry).exists(), (name, entry)
        assert target.results["status"] == "completed"
        assert target.results["counts"] == single.results["counts"] == {"rows": N, "ok": N, "errors": 0}
        assert target.results["aggregate_scores"] == single.results["aggregate_scores"]
        assert target.results["config"] == single.results["config"]
        assert target.results["provenance"]["eval_hash"] == single.results["provenance"]["eval_hash"]
        usage = {k: v for k, v in target.results["usage"].items() if k != "latency_ms"}  # timings differ
        assert usage == {k: v for k, v in single.results["usage"].items() if k != "latency_ms"}
        assert target.results["usage"]["latency_ms"]["count"] == N
        assert _rows(target) == _rows(single)
        assert target.errors == single.errors == []
        em = target.score(EM)
        assert (em["count"], em["sum"]) == (N, N - len(WRONG[name]))  # by hand: the scripted wrong rows


def test_the_leaderboard_equals_the_per_target_results(runs) -> None:
    results = json.loads((runs["out"] / "results.json").read_text())
    assert results["targets"] == ["base", "small", "tiny"]
    assert [e["target"] for e in results["leaderboard"]] == results["targets"]
    for entry in results["leaderboard"]:
        own = json.loads((runs["out"] / "targets" / entry["target"] / "results.json").read_text())
        want = [
            {k: s[k] for k in ("name", "mean", "ci_low", "ci_high", "count")} for s in own["aggregate_scores"]["scores"]
        ]
        assert entry["scores"] == want
        assert entry["scores"][0]["mean"] == pytest.approx((N - len(WRONG[entry["target"]])) / N)
    assert "targets" in results["config"] and "target" not in results["config"]
    page = (runs["out"] / "report.html").read_text()
    for name in WRONG:
        assert f'href="targets/{name}/report.html"' in page
    assert "Comparisons with the baseline" in page


def _compare(capsys, out: Path, base: Path, cand: Path) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = compare_main(["--baseline", str(base), "--candidate", str(cand), "--output", str(out)])
    capsys.readouterr()
    return code, json.loads((out / "comparison.json").read_text())


def test_comparisons_equal_pipeline_compare_except_the_run_wide_correction(runs, capsys) -> None:
    comparison = json.loads((runs["out"] / "comparison.json").read_text())
    assert comparison["baseline_target"] == "base"
    assert [c["target"] for c in comparison["comparisons"]] == ["small", "tiny"]
    targets = runs["out"] / "targets"
    raw = {}
    for entry in comparison["comparisons"]:
        name = entry["target"]
        code, alone = _compare(capsys, runs["tmp"] / f"cmp_{name}", targets / "base", targets / name)
        assert entry["counts"] == alone["counts"]
        assert len(entry["scores"]) == len(alone["scores"])
        for mine, theirs in zip(entry["scores"], alone["scores"], strict=True):
            differ = {"p_regression_adjusted", "verdict", "rows_needed"}
            assert {k: v for k, v in mine.items() if k not in differ} == {
                k: v for k, v in theirs.items() if k not in differ
            }
        em = entry["scores"][0]
        d = np.array([-1.0 if i in WRONG[name] else 0.0 for i in range(N)])
        assert em["name"] == EM and em["p_regression"] == pytest.approx(
            stats.ttest_1samp(d, -0.01, alternative="less").pvalue, rel=1e-9
        )
        raw[name] = (em["p_regression"], alone["verdict"], code)
    # Per comparison, "small" alone is a NO-GO (p 0.019 < 0.025); Holm over both candidates' exact-match
    # (ok_rate cannot regress: no row failed) doubles the smaller p to 0.039, so run-wide it is not.
    (p_small, alone_small, code_small), (p_tiny, alone_tiny, _) = raw["small"], raw["tiny"]
    assert p_small < 0.025 < 2 * p_small and p_tiny > 0.025
    assert (alone_small, code_small) == ("NO-GO", 1) and alone_tiny == "INCONCLUSIVE"
    small, tiny = (c["scores"][0] for c in comparison["comparisons"])
    assert small["p_regression_adjusted"] == pytest.approx(2 * p_small)  # Holm by hand: smallest of two, x2
    assert tiny["p_regression_adjusted"] == pytest.approx(max(2 * p_small, p_tiny))
    assert [c["verdict"] for c in comparison["comparisons"]] == ["INCONCLUSIVE", "INCONCLUSIVE"]
    # exact-match and ok_rate are gated in both; ok_rate (se = 0 within its margin) stays out of the family
    # the printed family is the one Holm adjusted over (it said 4, counting ok_rate's certain records)
    assert comparison["correction"] == {"method": "holm", "comparisons": 2, "gated_scores": 2}
    assert all(c["holm_family"] == 2 for c in comparison["comparisons"])
    assert [c["scores"][1]["p_regression_adjusted"] for c in comparison["comparisons"]] == [1.0, 1.0]


def test_adding_a_target_with_a_store_sends_only_that_targets_requests(servers, runs) -> None:
    tmp, data = runs["tmp"], runs["data"]
    store = {"cache": {"path": str(tmp / "store")}}
    assert _run({**_multi_config(data, servers, ["base", "small"]), **store}, tmp / "two") == 0
    for server in servers.values():
        server.reset()
    assert _run({**_multi_config(data, servers), **store}, tmp / "three") == 0
    assert {name: server.stats()["requests"] for name, server in servers.items()} == {"base": 0, "small": 0, "tiny": N}
    three = json.loads((tmp / "three" / "results.json").read_text())
    first = json.loads((runs["out"] / "results.json").read_text())
    assert three["leaderboard"] == first["leaderboard"]


def test_the_terminal_summary_prints_the_leaderboard(servers, runs, capsys) -> None:
    capsys.readouterr()
    assert (
        _run(_multi_config(runs["data"], servers), runs["tmp"] / "printed", "--cache", str(runs["tmp"] / "store")) == 0
    )
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines()]
    assert ["base", EM, str(N), "1.0000"] in [line[:4] for line in lines]
    assert ["small", EM, str(N), f"{(N - 6) / N:.4f}"] in [line[:4] for line in lines]
    assert "compared with base" in out and "small: INCONCLUSIVE" in out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target": {"model": {"url": "http://127.0.0.1:9/v1", "name": "m"}}}, "not both"),
        ({"targets": [{"name": "a", "model": {"url": "http://127.0.0.1:9/v1", "name": "m"}}] * 2}, "repeated: ['a']"),
        ({"targets": [{"name": "a/b", "model": {"url": "http://127.0.0.1:9/v1", "name": "m"}}]}, "must be letters"),
        ({"targets": []}, "at least one target"),
    ],
)
def test_bad_targets_are_refused_with_a_clear_message(servers, runs, capsys, change, message) -> None:
    config = {**_multi_config(runs["data"], servers), **change}
    capsys.readouterr()
    assert _run(config, runs["tmp"] / "bad") == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def _journaled(output: Path) -> set[str]:
    keys = set()
    for path in (output / "_responses").glob("*.jsonl"):
        keys |= {key for line in path.read_bytes().splitlines() if (key := line_key(line)) is not None}
    return keys


def test_kill_9_then_resume_sends_nothing_twice_for_any_target(servers, runs, tmp_path) -> None:
    for server in servers.values():
        server.reset()
        server.configure(latency_ms=30)
    output = tmp_path / "killed"
    config_path = tmp_path / "killed.yaml"
    config_path.write_text(yaml.safe_dump(_multi_config(runs["data"], servers)))
    command = [sys.executable, "-m", "pipeline.run", "--config", str(config_path), "--output", str(output)]
    process = subprocess.Popen(
        [*command, "--progress_interval", "0"], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while sum(s.stats()["by_status"].get("200", 0) for s in servers.values()) < 3 * N // 2:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run never got halfway"
        time.sleep(0.01)  # polling a real subprocess
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    assert not (output / "results.json").exists()
    recorded = {name: _journaled(output / "targets" / name) for name in servers}
    for server in servers.values():
        server.reset()
        server.configure(latency_ms=0)
    assert _run(_multi_config(runs["data"], servers), output, "--resume") == 0
    for name, server in servers.items():
        got = server.stats()
        assert got["requests"] == N - len(recorded[name]), name  # every recorded answer kept, the rest sent once
        assert set(got["per_prompt"].values()) <= {1}
    resumed = json.loads((output / "results.json").read_text())
    first = json.loads((runs["out"] / "results.json").read_text())
    assert resumed["leaderboard"] == first["leaderboard"]


def test_policy_applies_to_the_comparisons_and_is_refused_without_targets(servers, runs, capsys) -> None:
    tmp = runs["tmp"]
    policy = tmp / "gate.yaml"
    policy.write_text("correction: none\n")
    store = ("--cache", str(tmp / "store"))  # filled by the earlier runs: nothing is sent
    # --policy makes the run a gate: its exit code is the verdict's (1: a candidate is NO-GO), as compare's is
    assert _run(_multi_config(runs["data"], servers), tmp / "uncorrected", "--policy", str(policy), *store) == 1
    comparison = json.loads((tmp / "uncorrected" / "comparison.json").read_text())
    small = comparison["comparisons"][0]
    assert small["verdict"] == "NO-GO"  # as pipeline.compare alone decides it
    assert small["scores"][0]["p_regression_adjusted"] == small["scores"][0]["p_regression"]
    assert comparison["policy"]["correction"] == "none"
    capsys.readouterr()
    single = {**_base_config(runs["data"]), "target": {"model": _model(servers["base"])}}
    assert _run(single, tmp / "single_policy", "--policy", str(policy)) == 2
    assert "--policy applies to a run with targets" in capsys.readouterr().err
