"""The command line: unknown flags stop the run before anything is sent, --help, and clean interrupts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from beameval.testserver.harness import PROJECT_ROOT

QA = [{"question": f"question {i}", "answer": f"question {i}"} for i in range(200)]


def online_config(path: Path, target: dict, **params: object) -> dict:
    return {
        "dataset": {"path": str(path)},
        "target": target,
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, **params},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


@pytest.mark.parametrize(
    ("flag", "meant"),
    [
        (["--limt", "5"], "--limit"),
        (["--direct_num_worker=2"], "--direct_num_workers"),
        (["--runnr=DirectRunner"], "--runner"),
        (["--overwrit"], "--overwrite"),
    ],
)
def test_an_unknown_flag_is_an_error_before_any_request(
    clean_server, model_target, write_jsonl, run_eval, flag, meant
) -> None:
    result = run_eval(online_config(write_jsonl(QA), model_target()), *flag)
    assert result.code == 2
    name = flag[0].split("=")[0]
    assert f"unknown flag '{name}'; did you mean {meant}?" in result.stderr
    assert "beam.apache.org" in result.stderr and "Traceback" not in result.stderr
    assert clean_server.stats()["requests"] == 0
    assert not result.output.exists()


def test_beam_options_still_pass_through(clean_server, model_target, write_jsonl, run_eval) -> None:
    config = online_config(write_jsonl(QA[:5]), model_target())
    result = run_eval(config, "--runner=FnApiRunner", "--temp_location=/tmp", "--labels=airflow-version=v3")
    assert result.code == 0, result.stderr
    assert result.results["counts"]["ok"] == 5


def test_a_stray_argument_is_an_error(write_jsonl, run_eval) -> None:
    offline = {
        "dataset": {"path": str(write_jsonl([{"output": "a", "answer": "a"}]))},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}],
    }
    result = run_eval(offline, "5")
    assert result.code == 2 and "unexpected argument '5'" in result.stderr


def test_help_lists_the_evaluators_flags_and_points_at_beams(capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline.run import main

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--config", "--output", "--limit", "--overwrite", "--skip_preflight", "--progress_interval"):
        assert flag in text
    assert "https://beam.apache.org/releases/pydoc/current/apache_beam.options.pipeline_options.html" in text
    assert "130 interrupted" in text


def _start(config: dict, tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pipeline.run", "--config", str(config_path), "--output", str(out), *extra]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    process = subprocess.Popen(
        cmd,
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, out


def _workers_of(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[2]) == pgid and b"sdk_worker_main" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    ("processes", "sig"),
    [(1, signal.SIGINT), (2, signal.SIGINT), (2, signal.SIGTERM)],
    ids=["1-process-sigint", "2-processes-sigint", "2-processes-sigterm"],
)
def test_an_interrupt_stops_cleanly_with_one_line_and_exit_130(
    clean_server, model_target, write_jsonl, tmp_path, processes, sig
) -> None:
    clean_server.configure(latency_ms=200)
    extra = ["--direct_running_mode=multi_processing", f"--direct_num_workers={processes}"] if processes > 1 else []
    config = online_config(write_jsonl(QA), model_target(), ignore_request_failure=True)
    process, out = _start(config, tmp_path, "--progress_interval=0", *extra)
    deadline = time.monotonic() + 60
    while clean_server.stats()["requests"] < 8 * processes:  # the run is under way
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.1)
    os.killpg(process.pid, sig)  # what a terminal's Ctrl-C does: the whole process group
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    how = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert len(lines) == 1, stderr  # one line: no worker tracebacks, no Beam noise
    assert lines[0].startswith(
        f"interrupted: the evaluation was stopped ({how}) before it completed; results.json was not written."
    )
    assert f"responses already received are kept in {out}/_responses/ and are not sent again." in lines[0]
    assert "Traceback" not in stderr and stdout == ""
    assert not (out / "results.json").exists()
    assert clean_server.stats()["requests"] < len(QA)
    time.sleep(0.5)
    assert _workers_of(process.pid) == []  # no worker process outlives the run


@pytest.mark.parametrize(("flag", "said"), [("--limit=abc", "invalid int value: 'abc'"), ("--resume=maybe", "'maybe'")])
def test_a_known_flag_with_a_bad_value_is_one_line(write_jsonl, run_eval, flag, said) -> None:
    offline = {
        "dataset": {"path": str(write_jsonl([{"output": "a", "answer": "a"}]))},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}],
    }
    result = run_eval(offline, flag)
    assert result.code == 2 and said in result.stderr and "usage:" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
