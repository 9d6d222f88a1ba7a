"""The bad-input matrix: every input a user can get wrong, run through the real CLI in-process.

Each case asserts the exit code and the fragments of the one-paragraph message a user sees
(README "Failure handling"); none may print a Python traceback unless ``--debug`` is given.
Exit codes: 0 completed, 1 the run failed (strict mode, or a failure inside the pipeline),
2 the config, command line, dataset, endpoint or output directory is unusable.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from beameval.testserver.harness import free_port
from pipeline.run import main

EM = "exact-match.exact-match"
STRICT_HINT = "set params.ignore_request_failure: true"


def offline(path: Path | str, **params: object) -> dict:
    return {
        "dataset": {"path": str(path)},
        "params": params,
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}],
    }


def no_traceback(result) -> None:  # noqa: ANN001 - the conftest's CliResult
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run main() with a hand-made argv; return the exit code and stderr."""
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


# --- malformed JSONL ------------------------------------------------------------------------------


@pytest.fixture
def malformed_jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"answer": "a", "output": "a"}\n{not json\n{"answer": "b", "output": "c"}\n')
    return path


def test_malformed_jsonl_line_strict_names_file_and_line(malformed_jsonl, run_eval):
    result = run_eval(offline(malformed_jsonl))
    assert result.code == 1
    assert f"{malformed_jsonl} line 2 is not valid JSON" in result.stderr
    assert "during reading the dataset on row 1" in result.stderr and STRICT_HINT in result.stderr
    assert not (result.output / "results.json").exists()
    no_traceback(result)


def test_malformed_jsonl_line_lenient_is_an_input_error_record_with_the_raw_text(malformed_jsonl, run_eval):
    result = run_eval(offline(malformed_jsonl, ignore_request_failure=True))
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 3, "ok": 2, "errors": 1}
    [error] = result.errors
    assert (error["row_index"], error["phase"], error["metric"], error["item"]) == (1, "input", None, "{not json")
    assert f"{malformed_jsonl} line 2 is not valid JSON" in error["error"]
    bad_row = result.rows[1]
    assert bad_row["status"] == "error" and bad_row["item"] == "{not json" and math.isnan(bad_row[EM])
    no_traceback(result)


# --- empty and missing datasets -------------------------------------------------------------------


def test_empty_dataset_completes_with_zero_counts_and_null_statistics(tmp_path, run_eval):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = run_eval(offline(empty))
    assert result.code == 0, result.stderr
    assert result.results["status"] == "completed"
    assert result.results["counts"] == {"rows": 0, "ok": 0, "errors": 0}
    score = result.score(EM)
    assert (score["count"], score["nan_count"]) == (0, 0)
    assert all(score[key] is None for key in ("sum", "mean", "min", "max", "std_dev", "variance", "percentiles"))
    assert score["histogram"] == {"bins": []}
    assert result.rows == [] and result.errors == []
    no_traceback(result)


def test_dataset_path_matching_no_files(tmp_path, run_eval):
    result = run_eval(offline(tmp_path / "nothing-*.jsonl"))
    assert result.code == 2
    assert f"dataset path '{tmp_path}/nothing-*.jsonl' matches no files; check dataset.path." in result.stderr
    no_traceback(result)


def test_dataset_path_that_is_a_directory(tmp_path, run_eval):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text('{"answer": "a", "output": "a"}\n')
    result = run_eval(offline(tmp_path / "data"))
    assert result.code == 2
    assert "is a directory" in result.stderr and f"'{tmp_path}/data/*.jsonl'" in result.stderr
    no_traceback(result)


# --- template fields ------------------------------------------------------------------------------


def test_missing_template_field_names_the_field_and_the_keys(write_jsonl, run_eval):
    path = write_jsonl([{"question": "q", "output": "a"}])
    result = run_eval(offline(path))
    assert result.code == 2
    assert "metrics.0.reference reads item.answer, which none of the first 1 row(s) has" in result.stderr
    assert "the rows have: output, question" in result.stderr
    assert str(path) in result.stderr  # preflight names the file whose rows lack it
    no_traceback(result)


def test_missing_prompt_field_fails_before_any_request(write_jsonl, run_eval):
    path = write_jsonl([{"answer": "a"}])
    config = {
        **offline(path),
        "target": {"model": {"url": f"http://127.0.0.1:{free_port()}/v1", "name": "m", "format": "openai"}},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
    }
    result = run_eval(config)
    assert result.code == 2
    assert (
        "prompt_template.messages.0.content reads item.question, which none of the first 1 row(s) has" in result.stderr
    )
    assert "the rows have: answer" in result.stderr
    no_traceback(result)


def test_wrong_type_field_must_be_text(write_jsonl, run_eval):
    path = write_jsonl([{"answer": ["a", "b"], "output": "a"}])
    result = run_eval(offline(path))
    assert result.code == 2
    assert "the reference must be text, but template 'reference' rendered a list" in result.stderr
    assert "'| tojson'" in result.stderr
    no_traceback(result)
    in_pipeline = run_eval(offline(path), "--skip_preflight")
    assert in_pipeline.code == 1
    assert "during scoring for metric 'exact-match' on row 0" in in_pipeline.stderr
    assert "must be text" in in_pipeline.stderr
    no_traceback(in_pipeline)


# --- encodings ------------------------------------------------------------------------------------


def test_non_utf8_jsonl_names_the_line(tmp_path, run_eval):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"answer": "a", "output": "a"}\n{"answer": "caf\xe9", "output": "a"}\n')
    result = run_eval(offline(path))
    assert result.code == 1
    assert f"{path} line 2 is not valid UTF-8" in result.stderr and "re-encode the file as UTF-8" in result.stderr
    no_traceback(result)


def test_non_utf8_csv_names_the_line_and_column(tmp_path, run_eval):
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"answer,output\na,a\ncaf\xe9,a\nb,b\n")
    result = run_eval(offline(path))
    assert result.code == 1
    assert f"{path} line 3 is not valid UTF-8 (column 'answer')" in result.stderr
    no_traceback(result)
    lenient = run_eval(offline(path, ignore_request_failure=True))
    assert lenient.code == 0, lenient.stderr
    assert lenient.results["counts"] == {"rows": 3, "ok": 2, "errors": 1}
    [error] = lenient.errors
    assert (error["row_index"], error["phase"], error["item"]) == (1, "input", "caf\ufffd,a")


def test_non_utf8_csv_header(tmp_path, run_eval):
    path = tmp_path / "header.csv"
    path.write_bytes(b"answ\xe9r,output\na,a\n")
    result = run_eval(offline(path))
    assert result.code == 2
    assert f"{path} line 1 (the header) is not valid UTF-8" in result.stderr
    no_traceback(result)


# --- Parquet and CSV structure --------------------------------------------------------------------


def test_parquet_files_whose_schemas_disagree_are_read_one_by_one(tmp_path, run_eval):
    """Same column, int64 in one file and string in the other: each file is read with its own
    schema, so every row keeps its own type and nothing is unified or coerced."""
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(pa.table({"answer": [1, 2], "output": ["1", "3"]}), folder / "a.parquet")
    pq.write_table(pa.table({"answer": ["x"], "output": ["x"]}), folder / "b.parquet")
    assert (
        pq.read_schema(folder / "a.parquet").field("answer").type
        != pq.read_schema(folder / "b.parquet").field("answer").type
    )
    result = run_eval(offline(folder / "*.parquet"))
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 3, "ok": 3, "errors": 0}
    rows = result.rows
    assert [json.loads(r["item"])["answer"] for r in rows] == [1, 2, "x"]
    assert [r[EM] for r in rows] == [1.0, 0.0, 1.0]
    assert result.score(EM)["mean"] == pytest.approx(2 / 3)
    no_traceback(result)


def test_corrupt_parquet_file_after_the_first_names_the_file(tmp_path, run_eval):
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(pa.table({"answer": ["a"], "output": ["a"]}), folder / "a.parquet")
    (folder / "b.parquet").write_bytes(b"this is not parquet")
    result = run_eval(offline(folder / "*.parquet"))
    assert result.code == 2
    assert f"cannot read dataset file '{folder}/b.parquet': ArrowInvalid" in result.stderr
    assert "while running" not in result.stderr
    no_traceback(result)


def test_ragged_csv_row_names_the_line(tmp_path, run_eval):
    path = tmp_path / "ragged.csv"
    path.write_text("answer,output\na,a\nb,b,c\n")
    result = run_eval(offline(path))
    assert result.code == 1
    assert f"{path} line 3 has 3 fields but the header has 2" in result.stderr
    no_traceback(result)
    lenient = run_eval(offline(path, ignore_request_failure=True))
    assert lenient.code == 0
    [error] = lenient.errors
    assert (error["row_index"], error["phase"], error["item"]) == (1, "input", "b,b,c")


# --- config ---------------------------------------------------------------------------------------


def test_unknown_metric_type_lists_the_valid_ones(write_jsonl, run_eval):
    config = {**offline(write_jsonl([{"answer": "a"}])), "metrics": [{"type": "exactmatch"}]}
    result = run_eval(config)
    assert result.code == 2
    assert "unknown metric type 'exactmatch'; valid types are: " in result.stderr
    for valid in ("bleu", "exact-match", "f1", "rouge", "string-check", "number-check", "tool-calling"):
        assert valid in result.stderr
    no_traceback(result)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"parallelism": 0}, "'params.parallelism': Input should be greater than or equal to 1 (got 0)"),
        ({"parallelism": 10**6}, "'params.parallelism': Input should be less than or equal to 4096 (got 1000000)"),
        ({"max_retries": -1}, "'params.max_retries': Input should be greater than or equal to 0 (got -1)"),
        ({"inference": {"temperature": 3}}, "'params.inference.temperature': Input should be less than or equal to 2"),
        ({"limit_samples": 0}, "'params.limit_samples': Input should be greater than or equal to 1 (got 0)"),
        ({"paralelism": 4}, "unknown key 'params.paralelism'"),
    ],
)
def test_invalid_config_value_names_key_path_and_range(write_jsonl, run_eval, params, expected):
    result = run_eval(offline(write_jsonl([{"answer": "a", "output": "a"}]), **params))
    assert result.code == 2
    assert "is invalid: " in result.stderr and expected in result.stderr
    no_traceback(result)


def test_config_file_missing_or_not_yaml(tmp_path, capsys):
    out = str(tmp_path / "out")
    code, err = cli(capsys, "--config", str(tmp_path / "nope.yaml"), "--output", out)
    assert code == 2 and f"cannot read config file '{tmp_path}/nope.yaml': No such file or directory" in err
    (tmp_path / "bad.yaml").write_text("dataset: [unclosed\n  path: {\n")
    code, err = cli(capsys, "--config", str(tmp_path / "bad.yaml"), "--output", out)
    assert code == 2 and "is not valid YAML/JSON: " in err and "at line 2, column" in err
    assert len(err.strip().splitlines()) == 1  # one paragraph, not PyYAML's multi-line report
    (tmp_path / "bad.json").write_text('{"dataset": ')
    code, err = cli(capsys, "--config", str(tmp_path / "bad.json"), "--output", out)
    assert code == 2 and "is not valid JSON: Expecting value at line 1, column 13" in err
    (tmp_path / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    code, err = cli(capsys, "--config", str(tmp_path / "binary.yaml"), "--output", out)
    assert code == 2 and "is not UTF-8 text" in err
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    code, err = cli(capsys, "--config", str(tmp_path / "list.yaml"), "--output", out)
    assert code == 2 and "must be a mapping at the top level, got list" in err
    assert not (tmp_path / "out").exists()


def test_config_or_output_flag_missing(tmp_path, capsys, write_jsonl):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(offline(write_jsonl([{"answer": "a", "output": "a"}]))))
    usage = "both --config and --output are required"
    for argv in (["--config", str(config)], ["--output", str(tmp_path / "out")], []):
        code, err = cli(capsys, *argv)
        assert code == 2 and usage in err and "--config EVAL.yaml --output OUT_DIR" in err


def test_limit_zero_or_not_a_number(tmp_path, capsys, write_jsonl):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(offline(write_jsonl([{"answer": "a", "output": "a"}]))))
    code, err = cli(capsys, "--config", str(config), "--output", str(tmp_path / "out"), "--limit", "0")
    assert code == 2 and "--limit must be at least 1, got 0." in err
    code, err = cli(capsys, "--config", str(config), "--output", str(tmp_path / "out"), "--limit", "ten")
    assert code == 2 and "argument --limit: invalid int value: 'ten'" in err and "Traceback" not in err
    assert "usage:" not in err  # one paragraph, not argparse's usage dump


# --- endpoint and output directory ----------------------------------------------------------------


def test_unreachable_endpoint_fails_fast_naming_host_and_port(write_jsonl, run_eval):
    port = free_port()
    config = {
        **offline(write_jsonl([{"question": "q", "answer": "a", "output": "a"}])),
        "target": {"model": {"url": f"http://127.0.0.1:{port}/v1", "name": "m", "format": "openai"}},
        "prompt_template": "{{ item.question }}",
    }
    result = run_eval(config)
    assert result.code == 2
    assert f"cannot reach the endpoint at 127.0.0.1:{port}: the connection was refused" in result.stderr
    assert "--skip_preflight" in result.stderr  # the hint survives
    assert not result.output.exists()
    no_traceback(result)


def test_output_directory_under_a_regular_file(tmp_path, write_jsonl, run_eval):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    config = offline(write_jsonl([{"answer": "a", "output": "a"}]))
    result = run_eval(config, output=blocker / "out")
    assert result.code == 2
    assert f"cannot use '{blocker}/out' as the output directory: '{blocker}' is a file, not a directory" in (
        result.stderr
    )
    no_traceback(result)
    onto_file = run_eval(config, output=blocker)
    assert onto_file.code == 2 and "it is a file, not a directory; choose another --output" in onto_file.stderr
    assert blocker.read_text() == "x"


# --- --debug --------------------------------------------------------------------------------------


def test_debug_shows_the_traceback_and_keeps_the_message_and_exit_code(write_jsonl, run_eval):
    config = offline(write_jsonl([{"answer": "a", "output": "a"}]), parallelism=0)
    result = run_eval(config, "--debug")
    assert result.code == 2
    assert "Traceback (most recent call last)" in result.stderr and "ConfigError" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: config file ")
    assert "'params.parallelism'" in result.stderr
