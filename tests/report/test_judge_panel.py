"""The judge agreement panel, in a real headless Chromium, from a real calibrated run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from beameval.report.judge_panel import judge_section
from beameval.testserver.harness import ServerProcess
from pipeline.run import main as run_main

VERDICTS = ["bad", "ok", "good"]
N, LABELLED = 60, 40


@pytest.fixture(scope="module")
def calibrated_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An offline run judged by the test server, 40 of its 60 rows labelled by a person."""
    base = tmp_path_factory.mktemp("calibrated")
    rng = random.Random(9)
    judge = [rng.choice(VERDICTS) for _ in range(N)]
    human = [v if rng.random() < 0.8 else rng.choice(VERDICTS) for v in judge[:LABELLED]]
    (base / "data.jsonl").write_text("".join(json.dumps({"id": f"r{i}"}) + "\n" for i in range(N)))
    (base / "labels.csv").write_text("id,verdict\n" + "".join(f"r{i},{v}\n" for i, v in enumerate(human)))
    rules = [{"match": f"JUDGE <r{i}>", "reply": json.dumps({"verdict": v})} for i, v in enumerate(judge)]
    with ServerProcess(rules=rules) as server:
        config = {
            "dataset": {"path": str(base / "data.jsonl")},
            "metrics": [
                {
                    "type": "llm-judge",
                    "model": {"url": server.base_url, "name": "judge", "format": "openai"},
                    "prompt_template": {"messages": [{"role": "user", "content": "JUDGE <{{ item.id }}>"}]},
                    "scores": [
                        {"name": "verdict", "rubric": [{"label": v, "value": i} for i, v in enumerate(VERDICTS)]}
                    ],
                    "calibration": {"labels": str(base / "labels.csv")},
                }
            ],
        }
        (base / "eval.yaml").write_text(yaml.safe_dump(config))
        assert (
            run_main(["--config", str(base / "eval.yaml"), "--output", str(base / "out"), "--progress_interval=0"]) == 0
        )
    return base / "out"


def test_no_panel_without_calibration():
    assert judge_section({"aggregate_scores": {"scores": []}}) == ""


@pytest.mark.slow
def test_the_panel_shows_what_results_json_says(browser, calibrated_run: Path) -> None:
    results = json.loads((calibrated_run / "results.json").read_text())
    record = results["judge_agreement"][0]
    browser.open(calibrated_run / "report.html")
    cells = browser.eval(
        "Array.from(document.querySelectorAll('#judges svg.confusion g.cell'))"
        ".map(g => [g.dataset.human, g.dataset.judge, +g.dataset.count])"
    )
    assert cells == [[h, j, record["confusion"][h][j]] for h in VERDICTS for j in VERDICTS]
    assert sum(count for _, _, count in cells) == record["n"] == LABELLED
    facts = browser.eval(
        "Object.fromEntries(Array.from(document.querySelectorAll('#judges table.kv tr'))"
        ".map(r => [r.cells[0].textContent, r.cells[1].textContent]))"
    )
    assert facts["labelled rows"] == "40"
    assert (
        facts["kappa (quadratic)"]
        == f"{record['kappa']:.3f} [{record['kappa_ci_low']:.4f}, {record['kappa_ci_high']:.4f}]"
    )
    assert facts["alpha"] == f"{record['alpha']:.3f}"
    assert facts["calibration"].startswith("calibrated" if record["calibrated"] else "not calibrated")
    ppi = results["aggregate_scores"]["scores"][0]["ppi"]
    assert facts["human mean (PPI)"].startswith(f"{ppi['mean']:.3f} [{ppi['ci_low']:.4f}, {ppi['ci_high']:.4f}]")
    assert facts["human mean (PPI)"].endswith("40 labelled + 20 judged only")
    (calibrated_run.parent / "panel.png").write_bytes(browser.screenshot(1280, 900))
    log = browser.log()
    assert log.console_errors == [] and len(log.requests) == 1
