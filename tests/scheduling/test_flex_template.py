"""The Dataflow Flex Template (deploy/dataflow/): its parameters are the CLI's flags, and its job builds.

Nothing here reaches Google Cloud: the image is not built and the template is not
launched (no network). What is checked offline: ``metadata.json`` names exactly the
evaluator's flags (less a documented exclusion list), every parameter's example value
passes the template's own regexes and the CLI's parser, the Dockerfile's entry point
exists, and the launcher's command (``python main.py`` with every template parameter as
``--name=value`` plus the Dataflow options the launcher adds) builds the Dataflow job
with ``--dry_run`` without attempting a connection.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.options import SWITCH, EvalOptions
from tests.pipeline.test_no_network import GUARD

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "dataflow"
METADATA = json.loads((DEPLOY / "metadata.json").read_text())
SECRET = "projects/my-project/secrets/llm-key/versions/latest"  # not read: the preflight is skipped

#: Flags that are not template parameters, and why (docs/SCHEDULING.md repeats this list).
EXCLUDED = {
    "print_config_schema": "prints the config schema and exits: nothing to run",
    "markdown": "a modifier of --print_config_schema",
    "debug": "read from the raw command line before parsing, for local tracebacks; Dataflow keeps its own logs",
}

#: One value per template parameter, as a scheduler would pass them.
EXAMPLE = {
    "output": "gs://my-bucket/evals/qa/{run_date}/{run_id}",
    "history": "gs://my-bucket/evals/qa/history",
    "cache": "gs://my-bucket/evals/cache",
    "no_cache": "false",
    "limit": "10",
    "resume": "true",
    "overwrite": "false",
    "cancel_batches": "false",
    "skip_preflight": "true",
    "progress_interval": "0",
    "decide": "false",
    "baseline": "latest",
}


def _flags() -> dict[str, argparse.Action]:
    parser = argparse.ArgumentParser()
    EvalOptions._add_argparse_args(parser)
    return {action.dest: action for action in parser._actions if action.option_strings and action.dest != "help"}


def test_every_template_parameter_is_a_flag_and_every_flag_a_parameter() -> None:
    names = [p["name"] for p in METADATA["parameters"]]
    assert len(names) == len(set(names))
    flags = _flags()
    assert set(names) == set(flags) - set(EXCLUDED), set(names) ^ (set(flags) - set(EXCLUDED))
    assert set(EXCLUDED) <= set(flags)  # the exclusions are real flags, not stale names
    required = {p["name"] for p in METADATA["parameters"] if not p.get("isOptional")}
    assert required == {"config", "output"}  # what pipeline.run refuses to start without
    for parameter in METADATA["parameters"]:
        assert parameter["label"] and parameter["helpText"], parameter
        action = flags[parameter["name"]]
        if action.type is SWITCH["type"]:  # on/off flags take true|false from a template
            assert parameter["regexes"] == ["^(true|false)$"], parameter["name"]


def test_example_values_pass_the_templates_regexes_and_the_cli(tmp_path: Path) -> None:
    values = {**EXAMPLE, "config": "gs://my-bucket/evals/qa.yaml", "policy": "gs://my-bucket/evals/gate.yaml"}
    assert set(values) == {p["name"] for p in METADATA["parameters"]}
    for parameter in METADATA["parameters"]:
        for regex in parameter.get("regexes", []):
            assert re.fullmatch(regex, values[parameter["name"]]), (parameter["name"], regex)
    parsed = PipelineOptions([f"--{name}={value}" for name, value in values.items()]).view_as(EvalOptions)
    assert (parsed.resume, parsed.overwrite, parsed.no_cache, parsed.skip_preflight) == (True, False, False, True)
    assert (parsed.limit, parsed.progress_interval, parsed.cache) == (10, 0.0, values["cache"])


def test_dockerfile_uses_googles_launcher_and_an_entry_point_that_exists() -> None:
    docker = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM gcr\.io/dataflow-templates-base/python3\d+-template-launcher-base:", docker, re.M)
    env = dict(re.findall(r'^ENV (\w+)="([^"]+)"', docker, re.M))
    workdir = re.search(r"^ARG WORKDIR=(\S+)", docker, re.M).group(1)  # type: ignore[union-attr]
    copies = dict((dst.rstrip("/"), src) for src, dst in re.findall(r"^COPY (\S+) (\S+)$", docker, re.M))
    assert (
        env["FLEX_TEMPLATE_PYTHON_PY_FILE"] == "${WORKDIR}/main.py" and copies["./main.py"] == "deploy/dataflow/main.py"
    )
    assert env["FLEX_TEMPLATE_PYTHON_SETUP_FILE"] == "${WORKDIR}/setup.py" and workdir == "/template"
    for source in re.findall(r"^COPY (.+) \S+$", docker, re.M):
        for part in source.split():
            assert (ROOT / part).exists(), f"the Dockerfile copies {part}, which the repository does not have"
    assert "from pipeline.run import main" in (DEPLOY / "main.py").read_text()


def test_launcher_command_builds_the_dataflow_job_offline(tmp_path: Path, write_jsonl) -> None:
    dataset = write_jsonl([{"question": "q1", "answer": "a1"}, {"question": "q2", "answer": "a2"}])
    config = tmp_path / "qa.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "dataset": {"path": str(dataset)},
                "target": {"model": {"url": "https://llm.example.com/v1", "name": "m", "api_key_secret": SECRET}},
                "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
                "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
            }
        )
    )
    # a template job passes only the parameters it sets: --baseline belongs to --decide runs
    parameters = {**{k: v for k, v in EXAMPLE.items() if k != "baseline"}, "config": str(config)}
    launcher_options = [  # what the Flex Template launcher adds to the template's parameters
        "--runner=DataflowRunner",
        "--project=my-project",
        "--region=us-central1",
        "--job_name=nightly-eval-20260101",
        "--temp_location=gs://my-bucket/tmp",
        "--staging_location=gs://my-bucket/staging",
        f"--setup_file={ROOT / 'setup.py'}",
        "--labels=goog-dataflow-provided-template-type=flex",
    ]
    (tmp_path / "guard").mkdir()
    (tmp_path / "guard" / "sitecustomize.py").write_text(GUARD)
    log = tmp_path / "attempts.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "guard"), str(ROOT)]),
        "NETWORK_ATTEMPTS_LOG": str(log),
    }
    completed = subprocess.run(
        [sys.executable, str(DEPLOY / "main.py"), *[f"--{k}={v}" for k, v in parameters.items()], *launcher_options]
        + ["--dry_run=True"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert "dry run: built the DataflowRunner job" in completed.stdout
    attempts = log.read_text() if log.exists() else ""
    assert attempts == "", f"the dry run tried to reach the network:\n{attempts}"
