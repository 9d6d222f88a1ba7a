"""A metric of one's own: an installed package's entry point adds a type usable from YAML, gate included.

The package is ``examples/custom_metric`` (type ``word-overlap``), installed for real with pip
into a folder of the test's own, and the CLI runs as a subprocess with that folder on its
path, as a user's environment with the package installed would. Expected scores are
computed here from the dataset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml

from beameval.metrics import registry
from beameval.testserver.harness import PROJECT_ROOT

pytestmark = pytest.mark.slow

ROWS = [
    {"id": i, "kind": "short" if i % 2 else "long", "answer": "the quick brown fox", "output": output}
    for i, output in enumerate(["the quick fox", "a brown dog", "the quick brown fox", "", "fox", "quick brown"] * 10)
]


def overlap(answer: str, output: str) -> float:
    words = set(answer.lower().split())
    return len(words & set(output.lower().split())) / len(words)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(PROJECT_ROOT / "examples" / "custom_metric")],
        capture_output=True, text=True, cwd=build,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return target


def cli(site: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(PROJECT_ROOT)])}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, timeout=600)


def evaluate(site: Path, tmp_path: Path, name: str, rows: list[dict]) -> Path:
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = {
        "dataset": {"path": str(data)},
        "statistics": {"group_by": ["kind"]},
        "metrics": [{"type": "word-overlap", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}],
    }
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / f"out_{name}"
    done = cli(site, "pipeline.run", "--config", str(tmp_path / f"{name}.yaml"), "--output", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_an_installed_metric_type_runs_with_aggregates_groups_and_the_gate(site: Path, tmp_path: Path) -> None:
    out = evaluate(site, tmp_path, "base", ROWS)
    results = json.loads((out / "results.json").read_text())
    (score,) = results["aggregate_scores"]["scores"]
    values = [overlap(r["answer"], r["output"]) for r in ROWS]
    assert score["name"] == "word-overlap.overlap" and score["count"] == len(ROWS)
    assert score["mean"] == pytest.approx(sum(values) / len(values), rel=1e-12)
    assert score["range"] == [0.0, 1.0] and 0.0 <= score["ci_low"] < score["mean"] < score["ci_high"] <= 1.0
    groups = {g["value"]: g["scores"][0]["mean"] for g in results["groups"]}
    for kind in ("short", "long"):
        kept = [v for v, r in zip(values, ROWS, strict=True) if r["kind"] == kind]
        assert groups[kind] == pytest.approx(sum(kept) / len(kept), rel=1e-12)
    worse = evaluate(site, tmp_path, "worse", [{**r, "output": "nothing"} for r in ROWS])
    done = cli(
        site, "pipeline.compare", "--baseline", str(out), "--candidate", str(worse), "--output", str(tmp_path / "cmp")
    )
    comparison = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    gated = comparison["scores"][0]
    assert done.returncode == 1 and comparison["verdict"] == "NO-GO", done.stderr
    assert gated["name"] == "word-overlap.overlap" and gated["delta"] == pytest.approx(-sum(values) / len(values))
    assert gated["margin"] == pytest.approx(0.01)  # 1% of the metric's declared range


def test_an_unknown_type_still_lists_the_installed_one(site: Path, tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n")
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump({"dataset": {"path": str(data)}, "metrics": [{"type": "word-overlaps", "reference": "x"}]})
    )
    done = cli(site, "pipeline.run", "--config", str(tmp_path / "c.yaml"), "--output", str(tmp_path / "o"))
    assert done.returncode == 2 and "Did you mean 'word-overlap'?" in done.stderr, done.stderr


def test_a_plugin_that_fails_to_load_or_clashes_is_reported_by_name() -> None:
    broken = EntryPoint(name="broken-metric", value="no_such_module_here:Metric", group=registry.ENTRY_POINT_GROUP)
    message = registry._register_plugin(broken)
    assert message is not None and "metric type 'broken-metric'" in message and "could not be imported" in message
    clash = EntryPoint(name="exact-match", value="beameval.metrics.f1:F1", group=registry.ENTRY_POINT_GROUP)
    message = registry._register_plugin(clash)
    assert message is not None and "already exists" in message
    assert registry.metric_class("exact-match").__name__ == "ExactMatch"  # the built-in is untouched
    not_a_metric = EntryPoint(name="not-a-metric", value="math:sqrt", group=registry.ENTRY_POINT_GROUP)
    assert "is not a beameval.metrics.api.Metric subclass" in (registry._register_plugin(not_a_metric) or "")
