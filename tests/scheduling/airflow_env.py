"""The Airflow test's own virtual environment: built once under a cache directory, reused after.

Airflow and its providers are not dependencies of the evaluator, and their 2.2 GB must
stay out of ``.venv``: they live in ``AIRFLOW_VENV`` (default
``/tmp/airflow-venv``). The evaluator itself is not installed there; the DAG's ``python``
parameter points at the project's interpreter, as a deployment with a separate evaluator
environment would. A ``.ready`` marker holding the requirement list is written last, so an
interrupted build is redone, and a changed list rebuilds. A file lock keeps two pytest
processes from building it at once.

Run it as a script to build (or check) the environment ahead of the tests:
``python tests/scheduling/airflow_env.py``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REQUIREMENTS = [
    "apache-airflow==3.3.2",
    "apache-airflow-providers-apache-beam",
    "apache-airflow-providers-google",  # the Beam operator cannot be constructed without it
    "apache-beam==2.77.0",
]
VENV = Path(os.environ.get("AIRFLOW_VENV", "/tmp/airflow-venv"))
ROOT = Path(__file__).resolve().parents[2]  # the project: its `pipeline` is what the DAGs run


def ready(venv: Path = VENV) -> bool:
    """True when ``venv`` holds a finished build of exactly ``REQUIREMENTS``."""
    marker = venv / ".ready"
    return marker.exists() and marker.read_text().split("\n")[0] == " ".join(REQUIREMENTS)


def ensure(venv: Path = VENV, log: Path | None = None) -> tuple[Path, float]:
    """Build ``venv`` unless it is ready; return its ``airflow`` executable and the build's seconds (0 if reused)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready(venv):
            return venv / "bin" / "airflow", 0.0
        started = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        with open(log or os.devnull, "w") as out:
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            for command in (
                [sys.executable, "-m", "venv", str(venv)],
                [*pip, "--upgrade", "pip"],
                [*pip, *REQUIREMENTS],
            ):
                subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=True)
        seconds = time.monotonic() - started
        (venv / ".ready").write_text(" ".join(REQUIREMENTS) + f"\nbuilt in {seconds:.0f} s\n")
        return venv / "bin" / "airflow", seconds


def airflow_home(tmp_path: Path, dags: list[Path], **extra: str) -> dict[str, str]:
    """A fresh ``AIRFLOW_HOME`` under ``tmp_path`` with ``dags`` copied into its DAGs folder; its environment.

    The environment is this process's without Airflow, virtualenv and PYTHONPATH settings (the
    DAG's ``python`` parameter, not Airflow's interpreter, runs the evaluator), on sqlite, with
    no example DAGs and loopback exempt from proxies; ``extra`` adds variables.
    """
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    for dag in dags:
        shutil.copy(dag, home / "dags")
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "VIRTUAL_ENV", "PYTHONPATH"))},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        **extra,
    }


def dags_test(
    airflow_bin: Path, env: dict[str, str], dag_id: str, date: str, conf: dict[str, Any], timings: dict[str, float]
) -> tuple[int, str]:
    """``airflow dags test DAG DATE --conf CONF`` (from the project root, whose ``pipeline`` the tasks import):
    its exit code and output; its duration goes into ``timings[date]``."""
    began = time.monotonic()
    completed = subprocess.run(
        [str(airflow_bin), "dags", "test", dag_id, date, "--conf", json.dumps(conf)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    timings[date] = round(time.monotonic() - began, 1)
    return completed.returncode, completed.stdout + completed.stderr


def size_gb(venv: Path = VENV) -> float:
    """The environment's size on disk, in GB (what the progress line reports)."""
    return sum(f.lstat().st_size for f in venv.rglob("*") if f.is_file() or f.is_symlink()) / 1e9


if __name__ == "__main__":
    log = Path(f"{VENV}.build.log")
    if not ready():
        print(
            f"building the Airflow test environment in {VENV} (outside the repository; {' '.join(REQUIREMENTS)}; "
            f"about 2.2 GB and 5 minutes; log: {log}) ...",
            flush=True,
        )
    airflow, took = ensure(log=log)
    print(f"Airflow test environment: {VENV}, {size_gb():.1f} GB ({f'built in {took:.0f} s' if took else 'reused'})")
