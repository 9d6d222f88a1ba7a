"""Meta-tests of the metric registry: every registered type has its own test file."""

from __future__ import annotations

from pathlib import Path

import pytest

from beameval.core.errors import ConfigError
from beameval.metrics.base import MetricConfig
from beameval.metrics.registry import config_model, metric_types

HERE = Path(__file__).parent


def test_builtin_types() -> None:
    assert metric_types() == [
        "bleu",
        "exact-match",
        "f1",
        "llm-judge",
        "number-check",
        "remote",
        "retrieval-map",
        "retrieval-mrr",
        "retrieval-ndcg",
        "retrieval-precision",
        "retrieval-recall",
        "rouge",
        "string-check",
        "tool-calling",
    ]


@pytest.mark.parametrize("type_name", metric_types())
def test_every_metric_type_has_a_test_file(type_name: str) -> None:
    path = HERE / f"test_{type_name.replace('-', '_')}.py"
    assert path.is_file(), f"metric type {type_name!r} has no test file {path.name}"


@pytest.mark.parametrize("type_name", metric_types())
def test_config_classes_are_frozen_and_strict(type_name: str) -> None:
    model = config_model(type_name)
    assert issubclass(model, MetricConfig)
    assert model.model_config.get("frozen") is True
    assert model.model_config.get("extra") == "forbid"


def test_unknown_type_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="unknown metric type 'blue'; valid types are: bleu, "):
        config_model("blue")
