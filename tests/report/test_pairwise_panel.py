"""The pairwise panel, in a real headless Chromium, from a real two-target run with a pairwise judge."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import yaml

from beameval.report.pairwise_panel import pairwise_section
from beameval.testserver.harness import ServerProcess
from pipeline.run import main as run_main

#: The candidate's answers: rows 0-3 better than the baseline's "meh", row 4 identical, row 5 worse.
ANSWERS = ["GOOD answer 0", "GOOD answer 1", "GOOD answer 2", "GOOD answer 3", "meh", "BAD answer 5"]
JUDGE = [
    {"match": "GOOD answer 3", "reply": '{"preference": "A"}'},  # row 3: whatever is shown first, a flip
    {"match": "[The start of answer A]\nGOOD", "reply": '{"preference": "A"}'},
    {"match": "[The start of answer B]\nGOOD", "reply": '{"preference": "B"}'},
    {"match": "[The start of answer A]\nBAD", "reply": '{"preference": "B"}'},
    {"match": "[The start of answer B]\nBAD", "reply": '{"preference": "A"}'},
]


@pytest.fixture(scope="module")
def pairwise_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two targets (the baseline answers "meh" to everything) and a pairwise judge on the baseline's server."""
    base = tmp_path_factory.mktemp("pairwise")
    (base / "data.jsonl").write_text("".join(json.dumps({"question": f"Q{i}"}) + "\n" for i in range(len(ANSWERS))))
    candidate = [{"match": f"Q{i}", "reply": answer} for i, answer in enumerate(ANSWERS)]
    with contextlib.ExitStack() as running:
        baseline = running.enter_context(ServerProcess(rules=[*JUDGE, {"match": "Q", "reply": "meh"}]))
        other = running.enter_context(ServerProcess(rules=candidate))
        config = {
            "dataset": {"path": str(base / "data.jsonl")},
            "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
            "targets": [
                {"name": name, "model": {"url": server.base_url, "name": "m", "format": "openai"}}
                for name, server in (("base", baseline), ("cand", other))
            ],
            "metrics": [
                {
                    "type": "llm-judge",
                    "pairwise": True,
                    "model": {"url": baseline.base_url, "name": "judge", "format": "openai"},
                }
            ],
        }
        (base / "eval.yaml").write_text(yaml.safe_dump(config))
        args = ["--config", str(base / "eval.yaml"), "--output", str(base / "out"), "--progress_interval=0"]
        assert run_main(args) == 0
    return base / "out" / "targets" / "cand"


def test_no_panel_without_a_pairwise_judge():
    assert pairwise_section({"aggregate_scores": {"scores": []}}) == ""


@pytest.mark.slow
def test_the_panel_shows_what_results_json_says(browser, pairwise_run: Path) -> None:
    (record,) = json.loads((pairwise_run / "results.json").read_text())["pairwise"]
    assert (record["wins"], record["ties"], record["losses"]) == (3, 2, 1)
    assert (record["judged"], record["position_flips"], record["position_flip_rate"]) == (5, 1, 0.2)
    browser.open(pairwise_run / "report.html")
    bars = browser.eval(
        "Array.from(document.querySelectorAll('#pairwise svg.outcomes g.outcome'))"
        ".map(g => [g.dataset.outcome, +g.dataset.count])"
    )
    assert bars == [["win", 3], ["tie", 2], ["loss", 1]]
    facts = browser.eval(
        "Object.fromEntries(Array.from(document.querySelectorAll('#pairwise table.kv tr'))"
        ".map(r => [r.cells[0].textContent, r.cells[1].textContent]))"
    )
    assert facts["judged in both orders"] == "5"
    assert facts["position flip rate"] == "0.200 (1 of 5 judged rows)"
    assert facts["win rate (ties ½)"].startswith(f"{(3 + 0.5 * 2) / 6:.3f} [")
