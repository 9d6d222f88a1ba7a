"""``bench/retrieval.py --smoke`` runs both sides end to end: each document embedded once, a table printed."""

import json
import subprocess
import sys
from pathlib import Path

from beameval.testserver.harness import PROJECT_ROOT


def test_retrieval_bench_smoke(tmp_path: Path) -> None:
    report_path = tmp_path / "retrieval.json"
    cmd = [sys.executable, "bench/retrieval.py", "--smoke", "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads(report_path.read_text())["results"]
    assert (result["docs"], result["queries"]) == (2000, 50)
    assert result["embedding_requests"] == 2000 // 64 + 1 + 50 and result["each_document_once"]
    assert 0 < result["ours_peak_rss_mib"] < 2048 and result["in_memory_wall_s"] > 0
    assert "| 2,000 | 50 |" in done.stdout
