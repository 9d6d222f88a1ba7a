"""``bench/multi_target.py --smoke``: both sides run, every server gets each row once on each side."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from beameval.testserver.harness import PROJECT_ROOT


@pytest.mark.slow
def test_multi_target_bench_smoke(tmp_path: Path) -> None:
    report_path = tmp_path / "multi.json"
    cmd = [sys.executable, "bench/multi_target.py", "--smoke", "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["rows"] == 60 and report["targets"] == 3
    assert list(report["one_run_requests"].values()) == [60, 60, 60]
    assert list(report["separate_runs_requests"].values()) == [60, 60, 60]
    assert report["ratio"] == round(report["one_run_wall_s"] / report["separate_runs_wall_s"], 2)
    assert "| ratio (one / three) |" in done.stdout
