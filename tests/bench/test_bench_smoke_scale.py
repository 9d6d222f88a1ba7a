"""``bench/scale.py --smoke`` runs end to end and reports a throughput for every size."""

import json
import subprocess
import sys
from pathlib import Path

from beameval.testserver.harness import PROJECT_ROOT


def test_scale_bench_smoke(tmp_path: Path) -> None:
    report_path = tmp_path / "scale.json"
    cmd = [sys.executable, "bench/scale.py", "--smoke", "--cache", str(tmp_path / "data"), "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    results = report["results"]
    assert [r["size"] for r in results] == [200, 2000]
    for r in results:
        assert r["rows"] == r["size"] and r["ok"] == r["size"]
        assert r["rows_per_s"] > 0 and r["wall_s"] > 0
        assert 0 < r["peak_rss_tree_mib"] < 2048
        assert 0.65 <= r["exact_match_mean"] <= 0.95  # about 80% of generated outputs match
    assert "| offline |" in done.stdout


def test_scale_bench_statistics_smoke(tmp_path: Path) -> None:
    """The statistics case alternates both runs and reports the ratio of the best of each."""
    report_path = tmp_path / "scale.json"
    cmd = [sys.executable, "bench/scale.py", "--sizes", "", "--statistics", "2000", "--repeat", "2"]
    cmd += ["--cache", str(tmp_path / "data"), "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    base, grouped = json.loads(report_path.read_text())["results"]
    assert (base["mode"], grouped["mode"]) == ("offline, no statistics", "offline, group_by + cluster_by")
    assert base["rows"] == grouped["rows"] == 2000
    assert grouped["wall_ratio"] == round(grouped["wall_s"] / base["wall_s"], 2)
    assert grouped["wall_ratio_median_of_pairs"] > 0
    assert done.stderr.count("[2/2]") == 2
