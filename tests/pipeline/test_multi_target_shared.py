"""What the targets of one run share: one rendering of every prompt, one judge, one set of groups.

Three test-server instances answer the same questions differently (right, wrong, or
vague); a fourth is the LLM judge, grading an answer 5, 1 or 3. The dataset has three
topics (``statistics.group_by``) and one row whose prompt cannot render. The run must
render each prompt once (not once per target), fail the unrenderable row in every target
as a run of that target alone does, have the judge grade each target's own answers with
one call per (target, row), count those calls in each target's usage, send nothing again
from the store or on ``--resume``, and show per-group leaderboards equal to each target's
own groups and to statistics computed here from the rows.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from scipy import stats as sps

from beameval.testserver.harness import ServerProcess
from pipeline.run import main as run_main
from tests.conftest import CliResult

pytestmark = pytest.mark.slow

N = 12  # rows that render; row N has no question
TOPICS = ("alpha", "beta", "gamma")
#: Rows each target answers wrongly or vaguely; every other row it answers right.
WRONG = {"base": {4, 11}, "small": {0, 1, 2, 3, 5}, "tiny": {9}}
VAGUE = {"base": {9}, "small": set(), "tiny": {4, 5, 6, 7, 8}}
GRADE = {"right": 5, "wrong": 1, "vague": 3}  # what the judge answers for each kind of answer
EM, JUDGE = "exact-match.exact-match", "llm-judge.confidence"
LEVEL = 0.95


def _quality(target: str, i: int) -> str:
    return "wrong" if i in WRONG[target] else "vague" if i in VAGUE[target] else "right"


def _answer(target: str, i: int) -> str:
    return {"right": f"a{i}", "wrong": f"no{i}", "vague": f"maybe a{i}"}[_quality(target, i)]


def _judge_prompt(target: str, i: int) -> str:
    return f"JUDGE: {_answer(target, i)} vs a{i}"


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ServerProcess]]:
    processes = {
        name: ServerProcess(rules=[{"match": f"q{i:02d}?", "reply": _answer(name, i)} for i in range(N)])
        for name in WRONG
    }
    processes["judge"] = ServerProcess(
        rules=[
            {"match": "JUDGE: maybe", "reply": json.dumps({"confidence": GRADE["vague"]})},
            {"match": "JUDGE: no", "reply": json.dumps({"confidence": GRADE["wrong"]})},
            {"match": "JUDGE: a", "reply": json.dumps({"confidence": GRADE["right"]})},
        ]
    )
    with contextlib.ExitStack() as running:  # each server stops however the module ends
        yield {name: running.enter_context(process) for name, process in processes.items()}


def _config(data: Path, servers: dict[str, ServerProcess], store: Path | None) -> dict[str, Any]:
    judge = {
        "type": "llm-judge",
        "model": {"url": servers["judge"].base_url, "name": "judge", "format": "openai"},
        "prompt_template": {
            "messages": [{"role": "user", "content": "JUDGE: {{ sample.output_text }} vs {{ item.answer }}"}]
        },
        "scores": [{"name": "confidence", "minimum": 1, "maximum": 5}],
    }
    config: dict[str, Any] = {
        "dataset": {"path": str(data)},
        "targets": [
            {"name": name, "model": {"url": servers[name].base_url, "name": "test-model", "format": "openai"}}
            for name in WRONG
        ],
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, "max_retries": 1, "ignore_request_failure": True},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}, judge],
        "statistics": {"confidence_level": LEVEL, "group_by": ["topic"]},
    }
    if store is not None:
        config["cache"] = {"path": str(store)}
    return config


def _run(config: dict[str, Any], out: Path, *extra: str) -> int:
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return run_main(["--config", str(path), "--output", str(out), "--progress_interval", "0", *extra])


def _sent(servers: dict[str, ServerProcess]) -> dict[str, dict[str, Any]]:
    return {name: server.stats() for name, server in servers.items()}


def _target(out: Path, name: str) -> CliResult:
    return CliResult(0, "", "", out / "targets" / name)


@pytest.fixture(scope="module")
def run(servers, tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("shared")
    data = tmp / "data.jsonl"
    rows = [{"question": f"q{i:02d}?", "answer": f"a{i}", "topic": TOPICS[i % 3]} for i in range(N)]
    rows.append({"answer": f"a{N}", "topic": TOPICS[N % 3]})  # no question: its prompt cannot render
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    for server in servers.values():
        server.reset()
    assert _run(_config(data, servers, tmp / "store"), tmp / "multi") == 0
    return {"tmp": tmp, "data": data, "out": tmp / "multi", "sent": _sent(servers)}


def test_every_prompt_is_rendered_once_and_a_failing_one_fails_in_every_target(servers, run) -> None:
    results = json.loads((run["out"] / "results.json").read_text())
    # One rendering per row for the whole job (N + 1 rows, the unrenderable one included), not one per target.
    assert results["run"]["counters"]["prompts_rendered"] == N + 1
    for name in WRONG:
        assert run["sent"][name]["requests"] == N  # every prompt that rendered, once; the other never sent
        assert sorted(run["sent"][name]["per_prompt"].values()) == [1] * N
    single_out = run["tmp"] / "single"
    single = {k: v for k, v in _config(run["data"], servers, None).items() if k != "targets"}
    single["target"] = {"model": {"url": servers["base"].base_url, "name": "test-model", "format": "openai"}}
    assert _run(single, single_out) == 0
    alone = CliResult(0, "", "", single_out)
    assert alone.results["run"]["counters"]["prompts_rendered"] == N + 1
    assert [(e["row_index"], e["phase"]) for e in alone.errors] == [(N, "sample_generation")]
    assert "'question'" in alone.errors[0]["error"] and "item keys: ['answer', 'topic']" in alone.errors[0]["error"]
    for entry in results["leaderboard"]:
        target = _target(run["out"], entry["target"])
        assert target.errors == alone.errors  # the same error row, with the same message, in every target
        assert target.results["counts"] == entry["counts"] == {"rows": N + 1, "ok": N, "errors": 1}


def test_the_judge_grades_each_targets_own_answers_once_and_each_target_counts_its_calls(run) -> None:
    for name in WRONG:
        rows = _target(run["out"], name).rows
        assert [r["output_text"] for r in rows[:N]] == [_answer(name, i) for i in range(N)]
        assert [r[JUDGE] for r in rows[:N]] == [GRADE[_quality(name, i)] for i in range(N)]
        assert [r[EM] for r in rows[:N]] == [float(_quality(name, i) == "right") for i in range(N)]
        assert math.isnan(rows[N][JUDGE]) and math.isnan(rows[N][EM])  # never generated, never judged
    # One judge call per (target, row): the prompts it received are exactly those of every target's answers.
    judged = run["sent"]["judge"]
    wanted = Counter(_judge_prompt(name, i) for name in WRONG for i in range(N))
    assert judged["requests"] == len(WRONG) * N and Counter(judged["per_prompt"]) == wanted
    for name in WRONG:
        calls = _target(run["out"], name).results["usage"]["metric_calls"]
        # The test server counts whitespace-separated words: "JUDGE: <answer> vs aI" and '{"confidence": G}'.
        prompt_tokens = sum(len(_judge_prompt(name, i).split()) for i in range(N))
        assert calls == {
            "requests": N,
            "attempts": N,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 2 * N,
            "cache": {"hits": 0, "misses": N},
            "by_metric": {"llm-judge": {"requests": N, "prompt_tokens": prompt_tokens, "completion_tokens": 2 * N}},
        }


def test_a_rerun_from_the_store_or_resumed_sends_no_target_or_judge_call(servers, run) -> None:
    first = json.loads((run["out"] / "results.json").read_text())
    for server in servers.values():
        server.reset()
    again = run["tmp"] / "again"
    assert _run(_config(run["data"], servers, run["tmp"] / "store"), again) == 0
    assert {name: stats["requests"] for name, stats in _sent(servers).items()} == dict.fromkeys(servers, 0)
    rerun = json.loads((again / "results.json").read_text())
    assert rerun["leaderboard"] == first["leaderboard"]
    for name in WRONG:
        usage = _target(again, name).results["usage"]
        assert usage["cache"] == {"hits": N, "misses": 0}
        assert usage["metric_calls"]["cache"] == {"hits": N, "misses": 0} and usage["metric_calls"]["requests"] == 0
    assert _run(_config(run["data"], servers, None), run["out"], "--resume") == 0  # each target's journal alone
    assert {name: stats["requests"] for name, stats in _sent(servers).items()} == dict.fromkeys(servers, 0)
    assert json.loads((run["out"] / "results.json").read_text())["leaderboard"] == first["leaderboard"]


def _wilson(values: list[float]) -> tuple[float, float]:
    n, p = len(values), sum(values) / len(values)
    z = sps.norm.ppf(1 - (1 - LEVEL) / 2)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def _t_clipped(values: list[float], low: float, high: float) -> tuple[float, float]:
    n, mean = len(values), sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = sps.t.ppf(1 - (1 - LEVEL) / 2, n - 1) * sd / math.sqrt(n)
    return max(mean - half, low), min(mean + half, high)


def _expected_groups(name: str) -> dict[str, dict[str, tuple[float, float, float, int]]]:
    """Per topic and score: (mean, ci_low, ci_high, count), from the scripted answers, in plain Python."""
    expected: dict[str, dict[str, tuple[float, float, float, int]]] = {}
    for t, topic in enumerate(TOPICS):
        members = [i for i in range(N) if i % 3 == t]
        em = [float(_quality(name, i) == "right") for i in members]
        judge = [float(GRADE[_quality(name, i)]) for i in members]
        expected[topic] = {
            EM: (sum(em) / len(em), *_wilson(em), len(em)),
            JUDGE: (sum(judge) / len(judge), *_t_clipped(judge, 1.0, 5.0), len(judge)),
        }
    return expected


def test_the_leaderboard_per_group_equals_each_targets_groups_and_the_rows(run) -> None:
    results = json.loads((run["out"] / "results.json").read_text())
    page = (run["out"] / "report.html").read_text()
    sections = {
        m.group(1): m.group(2) for m in re.finditer(r"<section><h2>Group topic = (\w+)</h2>(.*?)</section>", page)
    }
    assert list(sections) == list(TOPICS)
    for entry in results["leaderboard"]:
        name = entry["target"]
        own = _target(run["out"], name).results["groups"]
        fields = ("name", "mean", "ci_low", "ci_high", "count")
        assert entry["groups"] == [
            {"by": g["by"], "value": g["value"], "scores": [{k: s[k] for k in fields} for s in g["scores"]]}
            for g in own
        ]
        assert [(g["by"], g["value"]) for g in entry["groups"]] == [("topic", topic) for topic in TOPICS]
        rows = _target(run["out"], name).rows
        for group in entry["groups"]:
            topic = group["value"]
            members = [r for r in rows if json.loads(r["item"])["topic"] == topic]
            scores = {s["name"]: s for s in group["scores"]}
            cells = []
            for score, (mean, low, high, count) in _expected_groups(name)[topic].items():
                # the rows' own scores (NaN for the unrenderable row) agree with the scripted answers
                assert sorted(r[score] for r in members if not math.isnan(r[score])) == sorted(
                    float(_quality(name, i) == "right") if score == EM else float(GRADE[_quality(name, i)])
                    for i in range(N)
                    if TOPICS[i % 3] == topic
                )
                got = scores[score]
                assert (got["mean"], got["ci_low"], got["ci_high"]) == pytest.approx((mean, low, high), rel=1e-12)
                assert got["count"] == count
                cells.append(
                    f'<span class="num">{got["mean"]:.4f}</span> <span class="interval">'
                    f'[{got["ci_low"]:.4f}, {got["ci_high"]:.4f}]</span> <span class="sub">n={count}'
                )
            # the page's table for this group: the target's row holds each score's mean, interval and count
            # (then, where it is one, "best" or "worst")
            row = re.search(rf'<tr><th><a href="targets/{name}/report.html">{name}</a></th>(.*?)</tr>', sections[topic])
            assert row is not None, sections[topic]
            shown = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
            assert len(shown) == len(cells) and all(
                re.fullmatch(re.escape(want) + "( · best| · worst)?</span>", c)
                for c, want in zip(shown, cells, strict=True)
            ), shown
