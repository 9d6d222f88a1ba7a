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

With ``decide: true`` a ``mode`` branch skips both and runs ``decide`` instead:
``python -m pipeline.run --config CONFIG --output OUTPUT_ROOT/<logical date> --history
HISTORY --resume --decide --baseline latest [--policy POLICY] [BEAM_ARGS]``, which
evaluates the night in waves (each wave one Beam job, all inside this one task) and stops
sending rows once the verdict against the latest accepted run is certain. Its exit code maps
as ``compare``'s (0 GO, 1 NO-GO fails, 4 INCONCLUSIVE skips). With no accepted run yet (the
first night), it runs the whole evaluation instead, which becomes the baseline.

Run parameters (``airflow dags test nightly_eval DATE --conf '{"config": ...}'`` or the
trigger form): ``config``, ``output_root``, ``history``, ``policy`` (optional), ``python``
(the interpreter that has the evaluator installed; default: the one running Airflow),
``decide`` (default false) and ``beam_args`` (extra options of the ``decide`` task's
evaluation, e.g. ``["--runner=DataflowRunner", "--project=..."]``).
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
#: A usage error of the evaluator (here: ``--decide`` found no baseline in the history).
EXIT_USAGE = 2


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

    Returns "GO", or "NO-BASELINE" on an evaluation's first night; otherwise as ``verdict_outcome``.
    Shared with ``nightly_batch_eval``.
    """
    completed = run_logged(compare_args(params, run_dir))
    if completed.returncode == EXIT_GO and "no baseline" in completed.stdout:  # the first night: nothing to compare
        log.info("verdict: none, no baseline yet; this run is the next night's baseline")
        return "NO-BASELINE"
    return verdict_outcome(completed.returncode, f"{run_dir}/comparison/report.html", "pipeline.compare")


def verdict_outcome(code: int, report: str, command: str) -> str:
    """A verdict's exit code as the task's outcome.

    GO returns "GO"; NO-GO fails the task (AirflowFailException: no retries), INCONCLUSIVE
    skips it (AirflowSkipException, which calls ``on_inconclusive``), any other code fails it.
    """
    if code == EXIT_GO:
        log.info("verdict: GO; report: %s", report)
        return "GO"
    if code == EXIT_NO_GO:
        raise AirflowFailException(f"NO-GO: the candidate regressed; report: {report}")
    if code == EXIT_INCONCLUSIVE:
        raise AirflowSkipException(f"INCONCLUSIVE: not enough evidence either way; report: {report}")
    raise AirflowFailException(f"{command} failed (exit {code}); see the lines above.")


def evaluate_args(params: dict[str, Any], run_dir: str) -> list[str]:
    """The whole night's evaluation, as the ``evaluate`` task runs it (``--resume``: a retried task continues)."""
    args = [params["python"], "-m", "pipeline.run", "--config", params["config"], "--output", run_dir]
    return [*args, "--history", params["history"], "--resume", *params.get("beam_args", [])]


def decide(params: dict[str, Any], run_dir: str) -> str:
    """Evaluate the night with ``--decide --baseline latest`` (every wave in this task); its verdict as the outcome.

    The first night of an evaluation has no accepted run to decide against (the history has
    none, or does not exist yet): the whole evaluation runs instead (the next night's
    baseline) and the task returns "NO-BASELINE".
    """
    args = [*evaluate_args(params, run_dir), "--decide", "--baseline", "latest"]
    if params.get("policy"):
        args += ["--policy", params["policy"]]
    completed = run_logged(args)
    first_night = ("no baseline", f"--history {params['history']!r} does not exist")  # nothing recorded yet
    if completed.returncode == EXIT_USAGE and any(reason in completed.stderr for reason in first_night):
        log.info("no accepted run to decide against yet: running the whole evaluation, the next night's baseline")
        full = run_logged(evaluate_args(params, run_dir))
        if full.returncode != 0:
            raise AirflowFailException(f"pipeline.run failed (exit {full.returncode}); see the lines above.")
        return "NO-BASELINE"
    return verdict_outcome(completed.returncode, f"{run_dir}/report.html", "pipeline.run --decide")


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
    params={
        **run_params(Param("eval.yaml", type="string", description="the evaluation config (path or gs://...)")),
        "decide": Param(False, type="boolean", description="stop sending rows once the verdict is certain"),
        "beam_args": Param([], type="array", description="extra evaluator options of the decide task"),
    },
    tags=["evaluation"],
) as dag:

    @task.branch(task_id="mode")
    def mode(params: dict[str, Any] | None = None) -> str:
        """``decide`` when the run asks for it, else the whole evaluation then ``compare``."""
        assert params is not None
        return "decide" if params.get("decide") else "evaluate"

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

    @task(task_id="decide", on_skipped_callback=on_inconclusive)
    def decide_early(run_dir: str, params: dict[str, Any] | None = None) -> str:
        """Evaluate in waves until the verdict against the latest accepted run is certain; returns the verdict."""
        assert params is not None
        return decide(params, run_dir)

    branch = mode()
    branch >> evaluate >> compare(RUN_DIR)
    branch >> decide_early(RUN_DIR)
