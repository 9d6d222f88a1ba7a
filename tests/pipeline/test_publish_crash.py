"""Publishing a run's outputs, killed at each of its steps: nothing is lost, and the next run completes.

The second run is a real subprocess that kills itself with SIGKILL at a named crash point
(``BEAMEVAL_CRASH_AT``, ``pipeline.output_dir.publish_outputs``): exactly what a kill -9
or a power cut between two steps leaves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from beameval.core.crash_points import CRASH_ENV
from beameval.testserver.harness import PROJECT_ROOT

METRICS = [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}]
OLD, NEW = 10, 20


def offline(path: Path) -> dict:
    return {"dataset": {"path": str(path)}, "metrics": METRICS}


def rows_folders(out: Path) -> dict[str, int]:
    """Every rows/ folder in OUT_DIR and its staging folders -> how many rows it holds."""
    found = [out / "rows", *out.glob("_staging-*/rows"), *out.glob("_staging-*/_replaced/rows")]
    return {str(p.relative_to(out)): pq.read_table(p).num_rows for p in found if p.is_dir()}


@pytest.mark.slow
@pytest.mark.parametrize("point", ["publish-manifest", "publish-aside", "publish-moved-errors", "publish-moved-rows"])
def test_a_kill_at_each_step_of_publish_loses_no_output_and_the_next_run_completes(
    point, write_jsonl, run_eval, tmp_path
):
    out = tmp_path / "out"
    old = offline(write_jsonl([{"output": "a", "answer": "a"}] * OLD, "old.jsonl"))
    assert run_eval(old, output=out).code == 0
    new = offline(write_jsonl([{"output": "a", "answer": "b"}] * NEW, "new.jsonl"))
    config = tmp_path / "new.yaml"
    config.write_text(yaml.safe_dump(new))
    command = [sys.executable, "-m", "pipeline.run", "--config", str(config), "--output", str(out), "--overwrite"]
    killed = subprocess.Popen(
        command, cwd=PROJECT_ROOT, env={**os.environ, CRASH_ENV: point}, stderr=subprocess.PIPE, text=True
    )
    _, stderr = killed.communicate(timeout=240)
    assert killed.returncode == -9, stderr

    # Both runs' rows are there whole, in OUT_DIR or in the staging folder; nothing was deleted yet.
    assert sorted(rows_folders(out).values()) == [OLD, NEW], rows_folders(out)
    results = [out / "results.json", *out.glob("_staging-*/_replaced/results.json")]
    (old_results,) = [p for p in results if p.exists()]
    assert json.loads(old_results.read_text())["counts"]["rows"] == OLD
    if (out / "results.json").exists():  # results.json never describes rows of another run
        assert rows_folders(out)["rows"] == OLD
    manifest = json.loads((out / "_manifest.json").read_text())
    assert {"rows", "errors", "results.json"} <= set(manifest["entries"])

    again = run_eval(new, "--overwrite", output=out)
    assert again.code == 0, again.stderr
    assert "took over the lock" in again.stderr and f"pid {killed.pid} on host" in again.stderr
    assert rows_folders(out) == {"rows": NEW} and again.results["counts"] == {"rows": NEW, "ok": NEW, "errors": 0}
    assert again.score("exact-match.exact-match")["mean"] == 0.0  # the new run's rows, not the old run's
    assert not list(out.glob("_staging-*"))


def test_manifest_entries_outside_out_dir_are_never_deleted(write_jsonl, run_eval, tmp_path):
    out = tmp_path / "nested" / "out"
    config = offline(write_jsonl([{"output": "a", "answer": "a"}] * OLD))
    assert run_eval(config, output=out).code == 0
    (tmp_path / "nested" / "sibling.txt").write_text("keep")
    manifest = json.loads((out / "_manifest.json").read_text())
    manifest["entries"] += ["..", "../sibling.txt", str(tmp_path), ".", "", "rows/../..", "_lock.json"]
    (out / "_manifest.json").write_text(json.dumps(manifest))
    for flag in ("--resume", "--overwrite"):
        again = run_eval(config, flag, output=out)
        assert again.code == 0, again.stderr
        assert (tmp_path / "nested" / "sibling.txt").read_text() == "keep"
        assert sorted(p.name for p in (tmp_path / "nested").iterdir()) == ["out", "sibling.txt"]
        assert again.results["counts"]["rows"] == OLD
