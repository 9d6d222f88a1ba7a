"""docs/CONFIG.md and the JSON Schema are generated from the models: stale docs fail, examples validate."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from beameval.config.reference import config_markdown, config_schema
from beameval.metrics.registry import metric_types

ROOT = Path(__file__).resolve().parents[2]


def test_docs_config_md_is_current() -> None:
    current = (ROOT / "docs" / "CONFIG.md").read_text(encoding="utf-8")
    assert current == config_markdown(), (
        "docs/CONFIG.md is stale: regenerate it with "
        "python -m pipeline.run --print_config_schema --markdown > docs/CONFIG.md"
    )


def test_every_metric_type_has_a_section() -> None:
    text = config_markdown()
    for type_name in metric_types():
        assert f"## Metric `{type_name}`" in text


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_the_examples_validate_against_the_schema(example: Path) -> None:
    jsonschema.validate(yaml.safe_load(example.read_text()), config_schema())


def test_the_schema_refuses_an_unknown_key_and_an_unknown_metric_type() -> None:
    schema = config_schema()
    base = {"dataset": {"path": "d.jsonl"}, "metrics": [{"type": "f1", "reference": "x", "candidate": "y"}]}
    jsonschema.validate(base, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**base, "datset": {}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**base, "metrics": [{"type": "no-such-metric"}]}, schema)


def test_print_config_schema_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline.run import main

    assert main(["--print_config_schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["properties"]["metrics"]["items"]["anyOf"]
