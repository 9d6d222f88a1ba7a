"""Airflow DAG ``nightly_batch_eval``: the nightly evaluation at batch prices, waiting without holding a worker.

For a config whose target is in batch mode with ``batch: {wait: false}`` (docs/SCHEDULING.md):

- ``submit``: ``python -m pipeline.run --config CONFIG --output OUTPUT_ROOT/<logical date>
  --history HISTORY --resume``. It uploads the requests, creates the batches, records
  them in the run's ``_responses/batches/`` and exits 75: submitted. (Exit 0 means there
  was nothing to wait for, every answer was in the store; anything else fails.)
- ``wait_for_batches``: a sensor in **reschedule** mode: each poke reruns the same command
  (``--resume`` attaches to the recorded batches, collects those that have finished, and
  sends again what failed, expired or was cancelled) and gives its worker slot back
  between pokes. Exit 75: not done yet, poke again in ``POKE_INTERVAL_S``; exit 0: every
  batch is collected and the run's outputs are complete; anything else fails the task.
  It gives up after ``TIMEOUT_S`` (26 hours: the providers' 24-hour window and a margin).
- ``compare``: as in ``nightly_eval``: GO or no baseline succeeds, NO-GO fails the DAG
  run, INCONCLUSIVE skips the task and calls ``on_inconclusive``.

The run parameters are ``nightly_eval``'s: ``config``, ``output_root``, ``history``,
``policy`` and ``python``. ``BEAMEVAL_BATCH_POKE_S`` in the environment of the Airflow
workers sets the seconds between pokes (default 600).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from nightly_eval import EXIT_GO, EXIT_INCONCLUSIVE, EXIT_NO_GO, RUN_DIR, _compare_args, on_inconclusive

log = logging.getLogger(__name__)

#: ``pipeline.run``'s exit code while batches are still running at the provider.
EXIT_PENDING = 75
POKE_INTERVAL_S = float(os.environ.get("BEAMEVAL_BATCH_POKE_S", "600"))
TIMEOUT_S = 26 * 3600


def _run_args(params: dict[str, Any], run_dir: str) -> list[str]:
    return [
        params["python"], "-m", "pipeline.run", "--config", params["config"], "--output", run_dir,
        "--history", params["history"], "--resume",
    ]  # fmt: skip


def _evaluate(params: dict[str, Any], run_dir: str) -> int:
    """Run (or resume) the night's evaluation; log its output; return its exit code."""
    completed = subprocess.run(_run_args(params, run_dir), capture_output=True, text=True)
    for line in (completed.stdout + completed.stderr).splitlines():
        log.info("%s", line)
    return completed.returncode


with DAG(
    dag_id="nightly_batch_eval",
    description="Evaluate the model every night through the provider's Batch API; gate on the comparison.",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # `latest` must see the previous night's run
    params={
        "config": Param("eval-batch.yaml", type="string", description="a config with target.model.mode: batch"),
        "output_root": Param("evals", type="string", description="runs go to OUTPUT_ROOT/<logical date>/"),
        "history": Param("evals/history", type="string", description="the --history location"),
        "policy": Param(None, type=["null", "string"], description="gate policy file (optional)"),
        "python": Param(sys.executable, type="string", description="interpreter with the evaluator installed"),
    },
    tags=["evaluation", "batch"],
) as dag:

    @task(task_id="submit")
    def submit(run_dir: str, params: dict[str, Any] | None = None) -> str:
        """Submit the night's batches (exit 75), or find every answer already there (exit 0)."""
        assert params is not None
        code = _evaluate(params, run_dir)
        if code == EXIT_PENDING:
            return "submitted"
        if code == 0:
            return "complete"
        raise AirflowFailException(f"pipeline.run failed (exit {code}); see the lines above.")

    @task.sensor(task_id="wait_for_batches", mode="reschedule", poke_interval=POKE_INTERVAL_S, timeout=TIMEOUT_S)
    def wait_for_batches(run_dir: str, submitted: str, params: dict[str, Any] | None = None) -> bool:
        """Collect what has finished; done when the run completes (exit 0), not yet on 75."""
        assert params is not None
        if submitted == "complete":  # nothing was sent: rerunning would only add a second history line
            return True
        code = _evaluate(params, run_dir)
        if code == EXIT_PENDING:
            log.info(
                "batches still running; next poke in %g s (the worker slot is released meanwhile)", POKE_INTERVAL_S
            )
            return False
        if code == 0:
            return True
        raise AirflowFailException(f"pipeline.run --resume failed (exit {code}); see the lines above.")

    @task(task_id="compare", retries=0, on_skipped_callback=on_inconclusive)
    def compare(run_dir: str, params: dict[str, Any] | None = None) -> str:
        """Gate the night's run against the latest accepted one; returns the verdict."""
        assert params is not None
        completed = subprocess.run(_compare_args(params, run_dir), capture_output=True, text=True)
        for line in (completed.stdout + completed.stderr).splitlines():
            log.info("%s", line)
        report = f"{run_dir}/comparison/report.html"
        if completed.returncode == EXIT_GO:
            return "NO-BASELINE" if "no baseline" in completed.stdout else "GO"
        if completed.returncode == EXIT_NO_GO:
            raise AirflowFailException(f"NO-GO: the candidate regressed; report: {report}")
        if completed.returncode == EXIT_INCONCLUSIVE:
            raise AirflowSkipException(f"INCONCLUSIVE: not enough evidence either way; report: {report}")
        raise AirflowFailException(f"pipeline.compare failed (exit {completed.returncode}); see the lines above.")

    wait_for_batches(RUN_DIR, submit(RUN_DIR)) >> compare(RUN_DIR)
