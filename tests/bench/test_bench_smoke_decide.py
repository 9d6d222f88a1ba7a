"""``bench/decide.py --smoke`` runs end to end: six cells, a clear regression NO-GO in every run, fewer rows used."""

import json
import subprocess
import sys
from pathlib import Path

from beameval.testserver.harness import PROJECT_ROOT


def test_decide_bench_smoke(tmp_path: Path) -> None:
    report_path = tmp_path / "decide.json"
    cmd = [sys.executable, "bench/decide.py", "--smoke", "--runs", "20", "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    cells = json.loads(report_path.read_text())["cells"]
    assert [(c["margin"], c["delta_in_margins"]) for c in cells] == [
        (m, f) for m in (0.05, 0.02) for f in (-3.0, -1.0, 0.0)
    ]
    regression = cells[0]
    assert regression["no_go"] >= 0.9 and regression["rows_share"] < 0.6
    assert all(c["go"] + c["no_go"] + c["inconclusive"] == 1.0 for c in cells)
    assert "| 0.05 | -3m | NO-GO |" in done.stdout
