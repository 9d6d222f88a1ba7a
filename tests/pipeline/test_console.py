"""The ``beameval`` console command: same sub-commands and flags as ``python -m pipeline.*``, never shadowed.

The slow tests install the project (``pip install --no-deps``, offline) into a fresh virtual
environment whose dependencies come from this one, then run its ``bin/beameval`` from a
directory holding a user's own ``pipeline.py`` and ``transforms.py``, which ``python -m
pipeline.run`` would import instead of the evaluator.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.console import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "sample_qa_with_outputs.jsonl"


@pytest.fixture(autouse=True)
def _console_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` sets PYTHONSAFEPATH for the processes it starts; keep it from leaking into later tests.

    Setting it here first makes monkeypatch restore the variable's earlier state (unset) after each test:
    a script run later in this pytest process (a benchmark that imports its own directory) would
    otherwise lose its script directory from ``sys.path``.
    """
    monkeypatch.setenv("PYTHONSAFEPATH", os.environ.get("PYTHONSAFEPATH", "1"))


def exit_code(argv: list[str]) -> int | str | None:
    """What the console script would exit with (argparse's ``--help`` exits by raising ``SystemExit``)."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


def test_every_command_runs_its_modules_main(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(COMMANDS) == {"run", "compare", "cache", "history", "report", "judge-labels"}
    for name in COMMANDS:
        assert exit_code([name, "--help"]) == 0
        assert "usage:" in capsys.readouterr().out
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    assert all(f"\n  {name} " in listing for name in COMMANDS)


def test_no_command_or_an_unknown_one_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: beameval COMMAND" in capsys.readouterr().err
    assert main(["histroy", "runs/"]) == 2
    assert capsys.readouterr().err == (
        "error: unknown command 'histroy'; did you mean 'history'? "
        "The commands are: run, compare, cache, history, report, judge-labels.\n"
    )


def test_the_flags_reach_the_command_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``beameval run`` refuses what ``python -m pipeline.run`` refuses, with its message."""
    assert main(["run", "--config", str(tmp_path / "nope.yaml"), "--output", str(tmp_path / "o"), "--limt", "5"]) == 2
    assert "unknown flag '--limt'; did you mean --limit?" in capsys.readouterr().err


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bin/beameval`` of a fresh venv holding ``pip install .`` of this checkout (its dependencies: ours)."""
    venv = tmp_path_factory.mktemp("console") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (purelib,) = venv.glob("lib/python*/site-packages")
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q"]
    subprocess.run(
        [*pip, "--no-deps", "--no-build-isolation", "--no-index", "--disable-pip-version-check", str(ROOT)],
        check=True,
        capture_output=True,
    )
    return venv / "bin" / "beameval"


def run_in_a_shadowing_directory(beameval: Path, work: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``beameval run`` of the offline QA example from ``work``, which holds modules named like ours."""
    work.mkdir()
    for name in ("pipeline.py", "transforms.py"):
        (work / name).write_text("raise SystemExit('the working directory shadowed the evaluator')\n")
    config = {
        "dataset": {"path": str(DATA)},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}],
    }
    (work / "eval.yaml").write_text(yaml.safe_dump(config))
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    done = subprocess.run(
        [str(beameval), "run", "--config", "eval.yaml", "--output", "out", *extra],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    results = json.loads((work / "out" / "results.json").read_text()) if done.returncode == 0 else {}
    return done, results


def expected_exact_match() -> float:
    """The QA sample's exact-match mean, by hand: lower-case, punctuation deleted, a/an/the dropped."""

    def squad(text: str) -> list[str]:
        return [word for word in re.sub(r"[^\w\s]", "", text.lower()).split() if word not in ("a", "an", "the")]

    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    return sum(squad(row["answer"]) == squad(row["output"]) for row in rows) / len(rows)


@pytest.mark.slow
def test_the_console_command_is_not_shadowed_by_the_working_directory(installed: Path, tmp_path: Path) -> None:
    done, results = run_in_a_shadowing_directory(installed, tmp_path / "work")
    assert done.returncode == 0, done.stderr
    assert results["counts"] == {"rows": 40, "ok": 40, "errors": 0}
    exact = next(s for s in results["aggregate_scores"]["scores"] if s["name"] == "exact-match.exact-match")
    assert exact["mean"] == pytest.approx(expected_exact_match())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_neither_are_beams_worker_processes(installed: Path, tmp_path: Path) -> None:
    """Beam starts its workers with ``python -m`` in the same directory; the command keeps it off their path."""
    done, results = run_in_a_shadowing_directory(
        installed, tmp_path / "work", "--direct_running_mode=multi_processing", "--direct_num_workers=2"
    )
    assert done.returncode == 0, done.stderr
    assert results["counts"] == {"rows": 40, "ok": 40, "errors": 0}
