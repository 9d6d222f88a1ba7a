"""The multi-model report in a real headless Chromium: leaderboard chart, best/worst, group verdicts, the matrix.

A real three-target run (three test-server instances that answer differently, a judge-like
1-5 score beside 0/1 scores through ``number-check``) writes ``OUT_DIR/report.html``; the page must
show each target's means as results.json has them, draw one chart panel per score on the
score's own axis, mark each score's best and worst target, list the per-group verdicts,
print p-values below 0.001 in scientific notation, and hold the prompt x model matrix:
one line per row with each target's answer, paged, searchable and sortable by a
target's score, fetching nothing and logging no error.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from beameval.testserver.harness import ServerProcess
from pipeline.run import main as run_main

pytestmark = pytest.mark.slow

N = 240
WRONG = {"base": set(), "small": set(range(0, N, 4)), "tiny": set(range(0, N, 12))}


def _question(i: int) -> str:
    return f"item {i:03d} ?"


def _reply(name: str, i: int) -> str:
    return "zzz" if i in WRONG[name] else f"a{i}"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("leaderboard")
    data = tmp / "data.jsonl"
    rows = [{"id": f"q{i}", "question": _question(i), "answer": f"a{i}", "topic": f"t{i % 2}"} for i in range(N)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rules = {name: [{"match": _question(i), "reply": _reply(name, i)} for i in range(N)] for name in WRONG}
    with contextlib.ExitStack() as running:
        servers = {name: running.enter_context(ServerProcess(rules=rules[name])) for name in WRONG}
        config = {
            "dataset": {"path": str(data)},
            "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
            "params": {"parallelism": 8, "max_retries": 1},
            "statistics": {"group_by": ["topic"]},
            "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
            "targets": [
                {"name": name, "model": {"url": server.base_url, "name": "test-model", "format": "openai"}}
                for name, server in servers.items()
            ],
        }
        (tmp / "eval.yaml").write_text(yaml.safe_dump(config))
        out = tmp / "out"
        code = run_main(["--config", str(tmp / "eval.yaml"), "--output", str(out), "--progress_interval", "0"])
        assert code == 0
    yield out, json.loads((out / "results.json").read_text())


def test_the_leaderboard_chart_table_and_group_verdicts(browser, report) -> None:
    out, results = report
    page = out / "report.html"
    browser.open(page)
    means = {e["target"]: e["scores"][0]["mean"] for e in results["leaderboard"]}
    assert means == {name: 1 - len(wrong) / N for name, wrong in WRONG.items()}
    panels = browser.eval("Array.from(document.querySelectorAll('svg.chart.lb')).map(s => s.dataset.score)")
    assert panels == ["exact-match.exact-match"]
    marked = browser.eval(
        "Array.from(document.querySelectorAll('svg.chart.lb g.target'))"
        ".map(g => [g.dataset.target, g.getAttribute('class')])"
    )
    assert marked == [["base", "target best"], ["small", "target worst"], ["tiny", "target "]]
    cells = browser.eval(
        "Array.from(document.querySelectorAll('#leaderboard table.leaderboard tbody tr'))"
        ".map(r => r.cells[1].dataset.rank)"
    )
    assert cells == ["best", "worst", ""]
    shown = browser.eval(
        "Array.from(document.querySelectorAll('#leaderboard table.leaderboard tbody tr'))"
        ".map(r => r.cells[1].textContent)"
    )
    assert [text.split()[0] for text in shown] == [f"{means[name]:.4f}" for name in WRONG]
    groups = browser.eval(
        "Array.from(document.querySelectorAll('table.group-verdicts tbody tr')).map(r => r.cells[0].textContent)"
    )
    assert sorted(set(groups)) == ["topic = t0", "topic = t1"]
    comparison = json.loads((out / "comparison.json").read_text())
    small = comparison["comparisons"][0]["scores"][0]
    assert small["p_regression_adjusted"] < 1e-3
    shown_p = browser.eval("document.querySelector('#comparisons table.grid tbody tr').cells[7].textContent")
    assert shown_p == f"{small['p_regression_adjusted']:.2e}"  # never 0.0000
    log = browser.log()
    assert log.requests == [page.resolve().as_uri()] and log.console_errors == []


def _visible(browser) -> list[int]:
    return browser.eval(
        "Array.from(document.querySelectorAll('#matrix-table tbody.r')).filter(b => !b.hidden)"
        ".map(b => +b.querySelector('td').textContent)"
    )


def test_the_prompt_by_model_matrix_pages_searches_and_sorts(browser, report) -> None:
    out, _ = report
    browser.open(out / "report.html")
    heads = browser.eval("Array.from(document.querySelectorAll('#matrix-table thead th')).map(th => th.textContent)")
    assert heads == ["row", "id", "question", "reference", "base", "small", "tiny"]
    assert browser.eval("document.querySelectorAll('#matrix-table tbody.r').length") == N
    assert _visible(browser) == list(range(100))  # one page
    line = browser.eval(
        "Array.from(document.querySelectorAll('#matrix-table tbody.r')[4].rows[0].cells).map(c => c.textContent)"
    )
    assert line[:4] == ["4", "q4", _question(4), "a4"]
    assert [re.sub(r"exact-match.*", "", cell) for cell in line[4:]] == ["a4", "zzz", "a4"]  # small is wrong on 4
    browser.type_into("#matrix-search", "item 13")
    assert _visible(browser) == [130, 131, 132, 133, 134, 135, 136, 137, 138, 139]
    browser.eval(
        "const s = document.querySelector('#matrix-search'); s.value = ''; s.dispatchEvent(new Event('input'))"
    )
    # sort by small's exact-match (options: base, small, tiny): the right answers first, row order within
    browser.eval(
        "const o = document.querySelector('#matrix [data-filter=sort]'); o.value = '1';"
        "o.dispatchEvent(new Event('change', {bubbles: true}))"
    )
    right = [i for i in range(N) if i not in WRONG["small"]]
    assert _visible(browser) == right[:100]
    browser.eval("document.querySelector('button.more[data-for=\"matrix-table\"]').click()")
    assert _visible(browser) == right + sorted(WRONG["small"])  # 100 + 500 > 240: everything, wrong ones last
    assert browser.log().console_errors == []
