"""``bench/quota.py --smoke`` runs end to end and measures utilisation, 429s and the worst window."""

import json
import subprocess
import sys
from pathlib import Path

from beameval.testserver.harness import PROJECT_ROOT


def test_quota_bench_smoke(tmp_path: Path) -> None:
    report_path = tmp_path / "quota.json"
    cmd = [sys.executable, "bench/quota.py", "--smoke", "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(report_path.read_text())["results"]
    assert [r["scenario"] for r in results] == ["shared-1", "headers-1"]
    for r in results:
        assert r["ok"] == r["rows"] == r["admitted"] > 0
        assert r["answered_429"] == 0  # paced by the shared budget, then by the advertised headers
        assert 0 < r["utilisation"] and 0 < r["worst_5s"] <= 1.1
    assert "| shared-1 | 1 |" in done.stdout
