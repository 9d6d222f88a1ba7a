"""Airflow DAG ``nightly_eval``: evaluate every night into a dated directory, compare with the latest run, gate.

Tasks, in order (docs/SCHEDULING.md):

- ``evaluate``: ``python -m pipeline.run --config CONFIG --output OUTPUT_ROOT/<logical date>
  --history HISTORY --resume`` through ``BeamRunPythonPipelineOperator`` (provider
  ``apache-airflow-providers-apache-beam``, which needs ``apache-airflow-providers-google``
  to be constructed). ``--resume`` makes a retried task continue the same night's run
  instead of refusing a directory that already holds outputs (answered requests are not
  sent again). The operator appends ``--runner=DirectRunner`` (the project runs it on its
  local engine, which never downloads Prism) and ``--labels=airflow-version=...``.
- ``compare``: ``python -m pipeline.compare --baseline latest --history HISTORY
  --candidate OUTPUT_ROOT/<logical date> --output OUTPUT_ROOT/<logical date>/comparison
  [--policy POLICY]``. ``latest`` is the last *accepted* run (its own comparison was GO, or
  it had no baseline): ``compare`` records each night's verdict in the history, so a
  regression that lasts two nights is NO-GO on both. Exit 0 (GO, or no earlier run of the
  same evaluation: the first night) succeeds; exit 1 (NO-GO) fails the task without retries, so the DAG run fails;
  exit 4 (INCONCLUSIVE) ends the task **skipped** (a state of its own in the UI) and calls
  ``on_inconclusive``; anything else fails. The verdict's paragraph and the path of
  ``report.html`` are in the task log.

Run parameters (``airflow dags test nightly_eval DATE --conf '{"config": ...}'`` or the
trigger form): ``config``, ``output_root``, ``history``, ``policy`` (optional), ``python``
(the interpreter that has the evaluator installed; default: the one running Airflow).
Everything may be a local path or a Beam file-system URL (``gs://...``), as the
evaluator reads and writes them.

To run the evaluation on Dataflow instead, set ``runner="DataflowRunner"`` and the usual
``pipeline_options`` (``project``, ``region``, ``temp_location``, ``setup_file``), or
launch the Flex Template with ``DataflowStartFlexTemplateOperator`` (docs/SCHEDULING.md).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import pendulum
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

log = logging.getLogger(__name__)

#: Where a night's run goes: OUTPUT_ROOT/<logical date, YYYY-MM-DD>.
RUN_DIR = "{{ params.output_root.rstrip('/') }}/{{ ds }}"
EXIT_GO, EXIT_NO_GO, EXIT_INCONCLUSIVE = 0, 1, 4


class EvaluatorPipelineOperator(BeamRunPythonPipelineOperator):
    """``BeamRunPythonPipelineOperator`` with ``py_interpreter`` templated, so it can come from ``params.python``."""

    template_fields = (*BeamRunPythonPipelineOperator.template_fields, "py_interpreter")


def on_inconclusive(context: Any) -> None:
    """Called when ``compare`` ends INCONCLUSIVE (the task is skipped): replace with a Slack/e-mail notifier."""
    ti = context["ti"]
    log.warning("nightly_eval %s: the comparison was INCONCLUSIVE; see the compare task's log.", ti.run_id)


def compare_args(params: dict[str, Any], run_dir: str) -> list[str]:
    """The ``compare`` task's command: the night's run against the latest accepted one in the history."""
    args = [params["python"], "-m", "pipeline.compare", "--baseline", "latest", "--history", params["history"]]
    args += ["--candidate", run_dir, "--output", f"{run_dir}/comparison"]
    if params.get("policy"):
        args += ["--policy", params["policy"]]
    return args


def run_logged(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run an evaluator command and put its output in the task log, line by line."""
    completed = subprocess.run(args, capture_output=True, text=True)
    for line in (completed.stdout + completed.stderr).splitlines():
        log.info("%s", line)
    return completed


def gate(params: dict[str, Any], run_dir: str) -> str:
    """Run ``pipeline.compare`` on the night's run and turn its exit code into the task's outcome.

    Returns "GO", or "NO-BASELINE" on an evaluation's first night; NO-GO fails the task
    (AirflowFailException: no retries), INCONCLUSIVE skips it (AirflowSkipException, which
    calls ``on_inconclusive``), any other exit code fails it. Shared with ``nightly_batch_eval``.
    """
    completed = run_logged(compare_args(params, run_dir))
    report = f"{run_dir}/comparison/report.html"
    if completed.returncode == EXIT_GO:
        if "no baseline" in completed.stdout:  # the first night of an evaluation: nothing to compare with
            log.info("verdict: none, no baseline yet; this run is the next night's baseline")
            return "NO-BASELINE"
        log.info("verdict: GO; report: %s", report)
        return "GO"
    if completed.returncode == EXIT_NO_GO:
        raise AirflowFailException(f"NO-GO: the candidate regressed; report: {report}")
    if completed.returncode == EXIT_INCONCLUSIVE:
        raise AirflowSkipException(f"INCONCLUSIVE: not enough evidence either way; report: {report}")
    raise AirflowFailException(f"pipeline.compare failed (exit {completed.returncode}); see the lines above.")


def run_params(config: Param) -> dict[str, Param]:
    """The run parameters of both nightly DAGs; ``config`` is each DAG's own (its default differs)."""
    return {
        "config": config,
        "output_root": Param("evals", type="string", description="runs go to OUTPUT_ROOT/<logical date>/"),
        "history": Param("evals/history", type="string", description="the --history location"),
        "policy": Param(None, type=["null", "string"], description="gate policy file (optional)"),
        "python": Param(sys.executable, type="string", description="interpreter with the evaluator installed"),
    }


#: How both nightly DAGs are scheduled: once a night, one run at a time (`latest` must see the previous night's run).
NIGHTLY: dict[str, Any] = {
    "schedule": "@daily",
    "start_date": pendulum.datetime(2026, 1, 1, tz="UTC"),
    "catchup": False,
    "max_active_runs": 1,
}


with DAG(
    dag_id="nightly_eval",
    description="Evaluate the model every night; fail on a statistically significant regression.",
    **NIGHTLY,
    params=run_params(Param("eval.yaml", type="string", description="the evaluation config (path or gs://...)")),
    tags=["evaluation"],
) as dag:
    evaluate = EvaluatorPipelineOperator(
        task_id="evaluate",
        py_interpreter="{{ params.python }}",
        py_options=["-m"],
        py_file="pipeline.run",  # run as `python -m pipeline.run`
        pipeline_options={
            "config": "{{ params.config }}",
            "output": RUN_DIR,
            "history": "{{ params.history }}",
            "resume": True,
        },
    )

    @task(task_id="compare", retries=0, on_skipped_callback=on_inconclusive)
    def compare(run_dir: str, params: dict[str, Any] | None = None) -> str:
        """Gate the night's run against the latest accepted one; returns the verdict."""
        assert params is not None
        return gate(params, run_dir)

    evaluate >> compare(RUN_DIR)
