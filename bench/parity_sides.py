"""Running one evaluation on either side, each in a subprocess, and reading back its results.

Ours is ``python -m pipeline.run`` (the real CLI, so the parity check covers it too); the
reference is ``bench/reference_runner.py`` under the reference SDK's own Python, since the
SDK is never imported by this project.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.sides import PROJECT_ROOT, REFERENCE_RUNNER, RunError, our_env, reference_env


def read_row_values(output: Path) -> dict[str, dict[str, Any]]:
    """``{score name: {row index: value}}`` from our ``rows/`` Parquet files."""
    import pyarrow.parquet as pq

    fixed = {"row_index", "status", "item", "output_text", "error"}
    values: dict[str, dict[str, Any]] = {}
    for path in sorted((output / "rows").glob("*.parquet")):
        table = pq.read_table(path)
        indexes = table.column("row_index").to_pylist()
        for name in table.column_names:
            if name in fixed:
                continue
            column = table.column(name).to_pylist()
            values.setdefault(name, {}).update({str(i): v for i, v in zip(indexes, column, strict=True)})
    return values


def _run_timed(what: str, cmd: list[str], **kwargs: Any) -> float:
    """Run ``cmd`` to completion and return its wall time; :class:`RunError` with its stderr tail if it fails."""
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RunError(f"{what} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return wall


def run_ours(config: dict[str, Any], work: Path, name: str, rows: bool = False) -> dict[str, Any]:
    """``python -m pipeline.run`` in a subprocess; returns results.json plus the command's wall time.

    With ``rows``, ``_row_values`` holds the per-row scores read from ``rows/``.
    """
    config_path = work / f"{name}.json"
    config_path.write_text(json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8")
    output = work / f"out-{name}"
    cmd = [sys.executable, "-m", "pipeline.run", "--config", str(config_path), "--output", str(output), "--overwrite"]
    wall = _run_timed(f"our pipeline ({name})", cmd, cwd=PROJECT_ROOT, env=our_env())
    results = json.loads((output / "results.json").read_text(encoding="utf-8"))
    results["_command_wall_s"] = wall
    if rows:
        results["_row_values"] = read_row_values(output)
    shutil.rmtree(output, ignore_errors=True)
    return results


def run_reference(python: str, spec: dict[str, Any], work: Path, name: str) -> dict[str, Any]:
    """``bench/reference_runner.py`` under the reference's Python; returns its JSON plus the command's wall time."""
    spec_path = work / f"{name}.ref-spec.json"
    spec_path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    out_path = work / f"{name}.ref-out.json"
    cmd = [python, str(REFERENCE_RUNNER), str(spec_path), str(out_path)]
    wall = _run_timed(f"the reference ({name})", cmd, env=reference_env())
    result = json.loads(out_path.read_text(encoding="utf-8"))
    result["_command_wall_s"] = wall
    return result
