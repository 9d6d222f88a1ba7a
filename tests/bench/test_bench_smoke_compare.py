"""``bench/compare.py --smoke`` runs end to end: both keys, a NO-GO on the generated drop, the delta numpy gives."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from beameval.testserver.harness import PROJECT_ROOT


@pytest.mark.slow
def test_compare_bench_smoke(tmp_path: Path) -> None:
    report_path = tmp_path / "compare.json"
    cmd = [sys.executable, "bench/compare.py", "--smoke", "--cache", str(tmp_path / "data"), "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["rows"] == 20_000
    assert [r["key"] for r in report["results"]] == ["row_index", "id"]
    for r in report["results"]:
        assert r["rows"] == 20_000 and r["wall_s"] > 0 and 0 < r["peak_rss_tree_mib"] < 2048
        assert r["verdict"] == "NO-GO" and r["exit_code"] == 1  # the candidate drops about 1.5 points
        assert r["delta_matches_numpy"] and -0.03 < r["deltas"]["exact-match.exact-match"] < -0.005
        assert r["flips"] > 0
    assert "| row_index | 20,000 |" in done.stdout
