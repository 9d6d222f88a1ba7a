"""docs/TESTSERVER.md stays true: every option, knob, rule field, route and fixture is listed; examples work."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from beameval.testserver.__main__ import build_parser, load_config
from beameval.testserver.app import _INFERENCE
from beameval.testserver.faults import FaultConfig, FaultInjector, Rule
from beameval.testserver.harness import ServerProcess
from beameval.testserver.replies import UNKNOWN_ANSWER, Replier, chat_response
from beameval.testserver.stats import Stats

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "TESTSERVER.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def text() -> str:
    return DOC.read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(text()) if lang == language]


def table_defaults(model: type[BaseModel]) -> dict[str, str]:
    """``| `field` | default | ...`` rows of the page whose field belongs to ``model``."""
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", text(), flags=re.MULTILINE)
    return {name: default.strip() for name, default in rows if name in model.model_fields}


def documented_default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.is_required():
        return "required"
    return json.dumps(field.get_default(call_default_factory=True))


def test_every_command_line_option_is_documented() -> None:
    options = [
        option
        for action in build_parser()._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    ]
    assert options, "the parser has no options?"
    for option in options:
        assert f"| `{option}" in text(), f"option {option} is not in the options table"


def test_every_fault_knob_and_rule_field_is_documented_with_its_default() -> None:
    for model in (FaultConfig, Rule):
        defaults = table_defaults(model)
        assert set(defaults) == set(model.model_fields), f"{model.__name__}: {set(model.model_fields) ^ set(defaults)}"
        for name, shown in defaults.items():
            assert shown == documented_default(model, name), f"{model.__name__}.{name}: doc says {shown}"


def test_every_route_stats_field_harness_member_and_fixture_is_documented() -> None:
    page = text()
    for path in [*_INFERENCE, "/v1/models", "/models", "/_config", "/_stats", "/_reset", "/_last_request"]:
        assert f"{path}`" in page, f"route {path} is not documented"
    for field in Stats().snapshot():
        assert f"`{field}`" in page, f"/_stats field {field} is not documented"
    public = [name for name in vars(ServerProcess) if not name.startswith("_")]
    for name in public:
        assert f"`{name}" in page, f"ServerProcess.{name} is not documented"
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    fixtures = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list)
    ]
    assert "run_eval" in fixtures
    for name in fixtures:
        assert f"| `{name}` |" in page, f"fixture {name} is not in the fixtures table"


def test_the_config_file_example_loads_and_the_flag_wins(tmp_path: Path) -> None:
    (example,) = blocks("json")
    path = tmp_path / "faults.json"
    path.write_text(example)
    config = load_config(build_parser().parse_args(["--config", str(path), "--latency-ms", "0"]))
    assert (config.latency_ms, config.seed, config.retry_after, len(config.rules)) == (0.0, 7, 1.0, 5)


def test_the_config_file_example_behaves_as_described(tmp_path: Path) -> None:
    config = FaultConfig.model_validate(json.loads(blocks("json")[0]))
    faults = FaultInjector(config)
    flaky = [faults.decide("a flaky question") for _ in range(3)]
    assert [(o.action, o.status, o.retry_after) for o in flaky[:2]] == [("error", 429, 0.5)] * 2
    assert flaky[2].action == "reply" and flaky[2].rule is not None
    assert flaky[2].rule.reply == "answered on the third try"
    broken = [faults.decide("this is always broken") for _ in range(2)]
    assert [(o.action, o.status, o.retry_after) for o in broken] == [("error", 500, 1.0)] * 2
    weather = faults.decide("what is the weather?")
    assert weather.rule is not None and weather.rule.tool_calls is not None
    reply = chat_response({}, "what is the weather?", weather.rule.reply, 1, weather.rule.tool_calls)
    (call,) = reply["choices"][0]["message"]["tool_calls"]
    assert call == {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    }
    assert reply["choices"][0]["finish_reason"] == "tool_calls" and reply["choices"][0]["message"]["content"] is None


def test_the_answers_example_is_looked_up_by_substring(tmp_path: Path) -> None:
    (example,) = blocks("jsonl")
    path = tmp_path / "answers.jsonl"
    path.write_text(example)
    replier = Replier.from_jsonl(path)
    assert replier.text("Answer briefly. What is the capital of Japan?") == "Tokyo"
    assert replier.text("What is the capital of Peru?") == UNKNOWN_ANSWER
    assert (ROOT / "data" / "sample_model_answers.jsonl").read_text().startswith(example.splitlines()[0])


@pytest.mark.slow
def test_the_pipeline_test_example_passes(clean_server, model_target, write_jsonl, run_eval) -> None:
    (source,) = [block for block in blocks("python") if "def test_" in block]
    namespace: dict[str, Any] = {}
    exec(compile(source, str(DOC), "exec"), namespace)  # noqa: S102 - the page's own example, run as written
    (name,) = [key for key in namespace if key.startswith("test_")]
    namespace[name](clean_server, model_target, write_jsonl, run_eval)
