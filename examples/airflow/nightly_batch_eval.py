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
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException
from nightly_eval import NIGHTLY, RUN_DIR, gate, on_inconclusive, run_logged, run_params

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
    return run_logged(_run_args(params, run_dir)).returncode


with DAG(
    dag_id="nightly_batch_eval",
    description="Evaluate the model every night through the provider's Batch API; gate on the comparison.",
    **NIGHTLY,
    params=run_params(Param("eval-batch.yaml", type="string", description="a config with target.model.mode: batch")),
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
        return gate(params, run_dir)

    wait_for_batches(RUN_DIR, submit(RUN_DIR)) >> compare(RUN_DIR)
