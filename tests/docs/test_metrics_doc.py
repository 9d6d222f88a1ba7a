"""docs/METRICS.md stays true: a section per metric type, every YAML example parses, examples run as documented."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from beameval.config.reference import config_schema
from beameval.config.schema import parse_config
from beameval.metrics.registry import metric_types

DOC = Path(__file__).resolve().parents[2] / "docs" / "METRICS.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_TYPE_HEADING = re.compile(r"^## `([^`]+)`$", re.MULTILINE)


def sections() -> dict[str, str]:
    """Heading text (backticks removed) -> the section's text, for every ``## `` heading."""
    parts = re.split(r"^## (.+)$", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {heading.strip().strip("`"): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(text) if lang == language]


def yaml_examples() -> list[tuple[str, Any]]:
    """(where, parsed YAML) for every ```yaml block of the page."""
    found = []
    for heading, body in sections().items():
        for number, source in enumerate(blocks(body, "yaml"), start=1):
            found.append((f"{heading} #{number}", yaml.safe_load(source)))
    return found


def example(section: str, language: str, number: int = 0) -> str:
    return blocks(sections()[section], language)[number]


def as_config(data: Any) -> dict[str, Any]:
    """A full config as it is; a metric entry wrapped into the smallest offline config."""
    if isinstance(data, dict) and "dataset" in data and "metrics" in data:
        return data
    if isinstance(data, dict) and "type" in data:
        return {"dataset": {"path": "d.jsonl"}, "metrics": [data]}
    raise AssertionError(f"a yaml example must be a full config (dataset + metrics) or a metric entry, got {data!r}")


def test_every_registered_metric_type_has_a_section() -> None:
    headings = set(_TYPE_HEADING.findall(DOC.read_text(encoding="utf-8")))
    assert set(metric_types()) <= headings, f"no section for {sorted(set(metric_types()) - headings)}"
    assert headings <= set(metric_types()), f"sections for unknown types: {sorted(headings - set(metric_types()))}"


def test_every_section_names_its_scores() -> None:
    text = sections()
    for type_name in metric_types():
        assert "Scores:" in text[type_name], f"section {type_name!r} does not say which scores it produces"


@pytest.mark.parametrize(("where", "data"), yaml_examples(), ids=[where for where, _ in yaml_examples()])
def test_every_yaml_example_parses(where: str, data: Any) -> None:
    config = as_config(data)
    parse_config(config, source=f"docs/METRICS.md {where}")
    jsonschema.validate(config, config_schema())  # what editors check the file against agrees


def test_every_jsonl_example_is_one_object_per_line() -> None:
    for heading, body in sections().items():
        for source in blocks(body, "jsonl"):
            for line in source.splitlines():
                assert isinstance(json.loads(line), dict), f"{heading}: {line[:60]}"


def test_the_documented_keys_are_the_config_keys() -> None:
    """Every key of a metric's config class is named in its section (so a new key cannot go undocumented)."""
    from beameval.metrics.registry import config_model

    text = sections()
    for type_name in metric_types():
        for key in config_model(type_name).model_fields:
            if key in ("type", "name", "description", "labels"):  # documented once, in "Keys every metric has"
                continue
            assert f"`{key}`" in text[type_name], f"section {type_name!r} does not document key {key!r}"


# The examples, run through the CLI offline; every expected value is computed here by hand.


def documented_run(section: str, tmp_path: Path, number: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A section's full-config example with its dataset path pointed at the section's jsonl rows."""
    rows = [json.loads(line) for line in example(section, "jsonl").splitlines()]
    config = as_config(yaml.safe_load(example(section, "yaml", number)))
    data = tmp_path / Path(config["dataset"]["path"]).name
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return {**config, "dataset": {**config["dataset"], "path": str(data)}}, rows


def stats(result: Any, name: str) -> tuple[int, int, float]:
    score = result.score(name)
    return score["count"], score["nan_count"], score["mean"]


def column(result: Any, name: str) -> list[Any]:
    return [row[name] for row in result.rows]


def same(values: list[float], expected: list[float]) -> bool:
    return len(values) == len(expected) and all(
        (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)
        for a, b in zip(values, expected, strict=True)
    )


@pytest.mark.slow
def test_exact_match_f1_and_string_check_examples_score_as_documented(tmp_path: Path, run_eval) -> None:
    """The three examples share data/qa_with_outputs.jsonl, so one run checks them all."""
    config, _rows = documented_run("exact-match", tmp_path)
    for section in ("f1", "string-check"):
        other = yaml.safe_load(example(section, "yaml"))
        assert other["dataset"]["path"] == "data/qa_with_outputs.jsonl"
        config["metrics"] += other["metrics"]
    result = run_eval(config)
    assert result.code == 0, result.stderr
    # Normalised (lower-case, punctuation deleted, articles dropped):
    # paris|paris, orwell|george orwell, pacific|pacific.
    assert column(result, "exact-match.exact-match") == [1.0, 0.0, 1.0]
    assert stats(result, "exact-match.exact-match") == (3, 0, pytest.approx(2 / 3))
    # Row 2: one shared token; precision 1/1, recall 1/2, F1 = 2 * 1 * 0.5 / 1.5.
    f1_row2 = 2 * 1.0 * 0.5 / (1.0 + 0.5)
    assert same(column(result, "f1.f1"), [1.0, f1_row2, 1.0])
    # Case-sensitive "contains": "paris." has no "Paris", "Orwell" no "George Orwell", "Pacific" no "the Pacific".
    assert column(result, "string-check.string-check") == [0.0, 0.0, 0.0]


@pytest.mark.slow
def test_number_check_example_scores_as_documented(tmp_path: Path, run_eval) -> None:
    config, _rows = documented_run("number-check", tmp_path)
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 4, "ok": 4, "errors": 0}  # NaN results are not failures
    # Last numbers: 51|51, 3.5|3.49, 1234|234 ("$1,234": the comma splits), none|42.
    exact = [float(51 == 51), float(3.5 == 3.49), float(1234 == 234), math.nan]
    close = [float(abs(51 - 51) <= 0.05), float(abs(3.5 - 3.49) <= 0.05), float(abs(1234 - 234) <= 0.05), math.nan]
    assert same(column(result, "number-check.number-check"), exact)
    assert same(column(result, "close.number-check"), close)
    assert stats(result, "number-check.number-check") == (3, 1, pytest.approx(1 / 3))
    assert stats(result, "close.number-check") == (3, 1, pytest.approx(2 / 3))


@pytest.mark.slow
def test_tool_calling_example_scores_as_documented(tmp_path: Path, run_eval) -> None:
    config, rows = documented_run("tool-calling", tmp_path)
    result = run_eval(config)
    assert result.code == 0, result.stderr
    # By hand: same name and args; same name, "unit" missing; get_time never called.
    names = [1.0, 1.0, 0.0]
    args = [1.0, 0.0, 0.0]
    assert column(result, "tool-calling.function_name_accuracy") == names
    assert column(result, "tool-calling.function_name_and_args_accuracy") == args
    assert stats(result, "tool-calling.function_name_accuracy") == (3, 0, pytest.approx(2 / 3))
    assert stats(result, "tool-calling.function_name_and_args_accuracy") == (3, 0, pytest.approx(1 / 3))
    predicted = json.loads(result.rows[2]["tool-calling.predicted_calls"])
    assert predicted == [{"name": "search", "arguments": {"q": "Beam"}}]
    assert rows[0]["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'


@pytest.mark.slow
def test_llm_judge_example_scores_as_documented(tmp_path: Path, run_eval, clean_server, monkeypatch) -> None:
    """The offline judge example with the test server as the judge, replying as the page says."""
    config, _rows = documented_run("llm-judge", tmp_path)
    judge = config["metrics"][0]
    monkeypatch.setenv(judge["model"]["api_key_env"], "doc-test-key")
    judge["model"] = {**judge["model"], "url": clean_server.base_url}
    clean_server.configure(
        api_key="doc-test-key",
        rules=[
            {"match": "Answer to grade: The capital of France", "reply": '{"correct": "yes", "helpfulness": 5}'},
            {"match": "Answer to grade: Aldous", "reply": '```json\n{"correct": "no", "helpfulness": 2}\n```'},
            {"match": "Answer to grade: The Pacific", "reply": "Looks right, 4/5."},
        ],
    )
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 3, "ok": 3, "errors": 0}
    assert same(column(result, "judge.correct"), [1.0, 0.0, math.nan])
    assert same(column(result, "judge.helpfulness"), [5.0, 2.0, math.nan])
    assert column(result, "judge.correct.label") == ["yes", "no", ""]
    no_json = "no JSON object found in the reply"
    assert column(result, "judge.nan_reason") == ["", "", f"correct: {no_json}; helpfulness: {no_json}"]
    assert json.loads(result.rows[1]["judge.reply"])["text"].startswith("```json")
    correct = result.score("judge.correct")
    assert correct["score_type"] == "rubric"
    assert (correct["count"], correct["nan_count"], correct["mean"]) == (2, 1, (1 + 0) / 2)
    assert [(d["label"], d["count"]) for d in correct["rubric_distribution"]] == [("no", 1), ("yes", 1)]
    assert stats(result, "judge.helpfulness") == (2, 1, (5 + 2) / 2)
    # What the page says the request carries: the derived schema as nvext.guided_json, max_tokens 1024.
    body = clean_server.last_request()["body"]
    assert body["nvext"]["guided_json"] == {
        "type": "object",
        "properties": {
            "correct": {"type": "string", "enum": ["no", "yes"]},
            "helpfulness": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": ["correct", "helpfulness"],
    }
    assert (body["max_tokens"], body["temperature"]) == (1024, 0)
    assert result.results["usage"]["metric_calls"]["requests"] == 3
