"""Shared fixtures for the metric tests: building metrics from config dicts, test corpora."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from beameval.metrics.base import Metric, MetricContext
from beameval.metrics.registry import config_model, resolve

Build = Callable[..., Metric[Any]]

_WORDS = (
    "the a an cat dog house river mountain quickly slowly runs jumped over under "
    "beautiful old new red green blue it is was were has have been of to in on at "
    "by with from and or but not never always 3.14 42 -7 1,000 don't can't "
    "Paris London Zürich naïve café résumé running ran runner studies studied "
    "happily happier happiest economy economic economics policy policies"
).split()
_PUNCTUATION = ("", "", "", ",", ".", "!", "?", ";", " .", "'s")

_HAND_WRITTEN = [
    ("The cat sat on the mat.", ["The cat is sitting on the mat.", "A cat sat on a mat."]),
    ("It is a guide to action.", ["It is a guide to action that ensures military success."]),
    ("", ["An empty candidate scores zero."]),
    ("Nothing in common here", ["Totally different words appear"]),
    ("Exactly the same sentence.", ["Exactly the same sentence."]),
    ("Zürich is naïve, café!", ["Zürich café is naïve"]),
    ("The economy grew 3.14% in 2023 .", ["The economy grew by 3.14 % in 2023 ."]),
    ("runner running ran", ["the runners run"]),
    ("a", ["the"]),
    ("Hello, world!", ["", "Hello world"]),
]


def _sentence(rng: random.Random, low: int = 1, high: int = 25) -> str:
    words = [rng.choice(_WORDS) + rng.choice(_PUNCTUATION) for _ in range(rng.randint(low, high))]
    return " ".join(words)


def _perturb(rng: random.Random, sentence: str) -> str:
    words = sentence.split()
    edited: list[str] = []
    for word in words:
        roll = rng.random()
        if roll < 0.1:
            continue  # drop
        if roll < 0.2:
            edited.append(rng.choice(_WORDS))  # substitute
        elif roll < 0.25:
            edited.extend([word, rng.choice(_WORDS)])  # insert
        else:
            edited.append(word)
    if len(edited) > 2 and rng.random() < 0.3:
        i = rng.randrange(len(edited) - 1)
        edited[i], edited[i + 1] = edited[i + 1], edited[i]  # swap neighbours
    return " ".join(edited)


@pytest.fixture(scope="session")
def corpus() -> list[tuple[str, list[str]]]:
    """~400 deterministic (candidate, references) pairs: perturbed, unrelated, hand-written."""
    rng = random.Random(20240611)
    rows = list(_HAND_WRITTEN)
    for index in range(390):
        references = [_sentence(rng) for _ in range(rng.randint(1, 3))]
        if index % 5 == 0:
            candidate = _sentence(rng, 0, 12)  # unrelated, sometimes empty
        else:
            candidate = _perturb(rng, references[rng.randrange(len(references))])
        rows.append((candidate, references))
    return rows


@pytest.fixture
def build() -> Build:
    """``build(type, **fields)``: validate a metric config dict and build the metric."""

    def _build(type_name: str, **fields: Any) -> Metric[Any]:
        config = config_model(type_name).model_validate({"type": type_name, **fields})
        return resolve(config)

    return _build


def ctx(item: Mapping[str, Any] | None = None, **sample: Any) -> MetricContext:
    """A row context; keyword arguments are the sample's fields."""
    return MetricContext(item or {}, sample)


@pytest.fixture
def row() -> Callable[..., MetricContext]:
    """``row(item, **sample)``: a ``MetricContext`` for one row."""
    return ctx
