"""``bench/runners.py --smoke`` runs every runner on both cases and reports rows/s and ratios to the local runner."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from beameval.testserver.harness import PROJECT_ROOT
from tests.runners.prism_env import BINARY, go_toolchain


@pytest.mark.slow
@pytest.mark.timeout(900)  # may wait for the Prism build (tests/runners/prism_env.py)
def test_runners_bench_smoke(tmp_path: Path) -> None:
    if not os.access(BINARY, os.X_OK) and go_toolchain() is None:
        pytest.skip("no Go toolchain: Prism, one of the benchmarked runners, cannot be built")
    report_path = tmp_path / "runners.json"
    cmd = [sys.executable, "bench/runners.py", "--smoke", "--cache", str(tmp_path / "data"), "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["smoke"] is True and report["online"] == {"latency_ms": 20, "parallelism": 16}
    results = report["results"]
    assert [(r["case"], r["runner"]) for r in results] == [
        (case, runner) for case in ("offline", "online") for runner in ("local", "prism", "python job service")
    ]
    for r in results:
        assert r["rows"] == r["ok"] == (200 if r["case"] == "offline" else 40)
        assert r["rows_per_s"] > 0 and r["ratio_to_local"] > 0
        assert r["ratio_to_local"] == round(
            r["rows_per_s"] / results[0 if r["case"] == "offline" else 3]["rows_per_s"], 2
        )
    assert {r["exact_match_mean"] for r in results if r["case"] == "offline"} == {results[0]["exact_match_mean"]}
    assert "| offline | 200 | prism |" in done.stdout and "| online | 40 | python job service |" in done.stdout
