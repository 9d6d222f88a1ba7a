"""``bench/stage_times.py``: a real local run, with each fused stage's CPU and wall seconds and the totals."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from beameval.testserver.harness import PROJECT_ROOT


@pytest.mark.slow
def test_stage_times_reports_every_busy_stage_and_the_totals(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(json.dumps({"q": f"q{i}", "a": "x", "out": "x" if i % 2 else "y"}) + "\n" for i in range(20_000))
    )
    config = {
        "dataset": {"path": str(data)},
        "metrics": [{"type": "exact-match", "reference": "{{ item.a }}", "candidate": "{{ item.out }}"}],
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "bench/stage_times.py", "--", "--config", str(tmp_path / "config.yaml")]
    command += ["--output", str(tmp_path / "out"), "--progress_interval=0"]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["counts"]["rows"] == 20_000
    stages = re.findall(r"^ *([\d.]+) s CPU +([\d.]+) s wall +([\d.]+) s waiting  (.+)$", done.stderr, re.M)
    assert any("ReadRows" in name for *_, name in stages), done.stderr[-2000:]  # the offline run's one stage
    total = re.search(r"^ *([\d.]+) s CPU +([\d.]+) s wall in bundles; process ([\d.]+) s CPU", done.stderr, re.M)
    assert total is not None, done.stderr[-2000:]
    in_bundles, process_cpu = float(total.group(1)), float(total.group(3))
    assert 0 < sum(float(cpu) for cpu, *_ in stages) <= in_bundles + 0.01 * len(stages) < process_cpu
    assert "collections [" in done.stderr
