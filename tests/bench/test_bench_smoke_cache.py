"""``bench/cache.py --smoke``: a fully cached rerun answers every row from the store, and kill -9 + --resume add up."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from beameval.testserver.harness import PROJECT_ROOT


@pytest.mark.slow
def test_cache_bench_smoke(tmp_path: Path) -> None:
    report_path = tmp_path / "cache.json"
    cmd = [sys.executable, "bench/cache.py", "--smoke", "--cache", str(tmp_path / "data"), "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    (size,) = report["sizes"]
    assert size["size"] == size["store_entries"] == 1000
    assert size["offline_wall_s"] > 0 and size["cached_wall_s"] > 0
    assert size["ratio"] == round(size["cached_wall_s"] / size["offline_wall_s"], 2)
    assert 0 < size["cached_peak_rss_tree_mib"] < 2048
    kill = report["kill"]
    assert kill["resumed_ok"] == kill["rows"] == 120
    # The resume sent exactly what the journal did not hold, and no more than the bound.
    assert kill["sent_by_resume"] == kill["rows"] - kill["recorded_in_journal"] <= kill["bound"]
    assert "| cached rerun wall |" in done.stdout or "cached rerun wall" in done.stdout
