"""``bench/batch.py --smoke`` runs end to end: every request answered once, through several batches, under 2 GiB."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from beameval.testserver.harness import PROJECT_ROOT


@pytest.mark.parametrize("judge", [False, True], ids=["target", "target-and-judge"])
def test_batch_bench_smoke(tmp_path: Path, judge: bool) -> None:
    report_path = tmp_path / "batch.json"
    cmd = [sys.executable, "bench/batch.py", "--smoke", "--cache", str(tmp_path / "data"), "--json", str(report_path)]
    done = subprocess.run(
        [*cmd, *(["--judge"] if judge else [])], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(report_path.read_text())
    requests = 2 if judge else 1
    assert result["rows"] == result["ok"] == 2_000 and result["lines_answered"] == requests * 2_000
    assert result["batches"] == requests * 4 and result["in_two_batches"] == 0 and result["chat_requests"] == 0
    assert 0 < result["peak_rss_tree_mib"] < 2048 and result["under_2_gib"] is True
    assert f"| 2,000 | {requests * 4} |" in done.stdout
