"""``bench/inference.py --smoke`` runs every scenario end to end and reports a throughput for each (not the targets)."""

import json
import subprocess
import sys
from pathlib import Path

from beameval.testserver.harness import PROJECT_ROOT


def _rates(run: dict) -> list[float]:
    return [run["rows_per_s_busy"], run["rows_per_s_command"]]


def test_inference_bench_smoke(tmp_path: Path) -> None:
    report_path = tmp_path / "inference.json"
    cmd = [sys.executable, "bench/inference.py", "--smoke", "--json", str(report_path)]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["smoke"] is True and report["reference_sdk"] is None
    runs = report["runs"]
    assert set(runs) == {"scenario_1_20ms", "scenario_2", "scenario_3", "scenario_4"}

    s1 = runs["scenario_1_20ms"]
    for run in (s1["ours_1p"], s1["ours_2p"], s1["bare_aiohttp"], s1["bare_httpx"], s1["bare_raw"], s1["engine"]):
        assert run["ok"] == run["rows"] > 0 and min(_rates(run)) > 0
        assert 0 < run["mean_in_flight"] <= run["server"]["peak_in_flight"]  # requests held at the 20 ms server
    assert s1["engine"]["side"] == "engine" and s1["engine"]["exact_match_mean"] == 0.5  # the echo server matches half
    assert s1["ours_2p"]["processes"] == 2 and s1["ours_2p"]["rows"] == 2 * s1["ours_1p"]["rows"]

    s2 = runs["scenario_2"]
    for key in ("ours_1p", "bare_aiohttp", "bare_httpx", "bare_raw"):
        assert s2[key]["ok"] == s2[key]["rows"] > 0 and min(_rates(s2[key])) > 0

    s3 = runs["scenario_3"]["slowest"]
    assert s3["rows"] > 0 and min(_rates(s3)) > 0 and 0 < s3["success_rate"] <= 1
    assert s3["server"]["peak_in_flight"] <= 16  # the capacity the server enforces

    for side in ("ours", "bare-aiohttp", "bare-httpx", "bare-raw"):
        big = runs["scenario_4"][side]["big"]
        assert min(_rates(big)) > 0 and runs["scenario_4"][side]["cpu_ms_per_row"] > 0
    offline = runs["scenario_4"]["offline"]["big"]  # no target: the server saw nothing, every row was scored
    assert offline["ok"] == offline["rows"] > 0 and offline["server"]["requests"] == 0
    assert offline["exact_match_mean"] == 1.0 and runs["scenario_4"]["offline"]["cpu_ms_per_row"] > 0

    table = done.stdout
    assert "| scenario | measured | baseline | ratio | target | pass/fail |" in table
    for number in ("1.", "2.", "3.", "4."):
        assert f"| {number} " in table
    assert "| 4. (bound) one process at 0 ms" in table
    assert "| 4. (bound) ours: client CPU per row vs the one-GIL floor" in table
