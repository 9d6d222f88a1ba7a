"""RenderPrompts: render each row's ``prompt_template`` once, before the graph fans out to the targets.

Every target's stages (the store lookup, GenerateSamples, the Batch API stage) build their
request from the carried ``InputRow.prompt`` (``beameval.core.prompt``) instead of
rendering again: a multi-target run renders each row once, not once per target, and a
single-target run with a store no longer renders a row for its lookup and again to send
it. It runs before ``params.repeats`` too (the prompt does not depend on the sample).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beameval.core.prompt import render_prompt
from beameval.core.records import InputRow
from beameval.core.templates import Template
from transforms import NAMESPACE

__all__ = ["RenderPrompts"]


class RenderPrompts(beam.DoFn):
    """InputRow -> the same row with ``prompt`` set; unreadable rows pass unchanged (nothing to render).

    Counts ``prompts_rendered``: the template renders (failures included), once per row.
    """

    def __init__(self, prompt_template: str | dict[str, Any] | None) -> None:
        self._source = prompt_template

    def setup(self) -> None:
        self._template = Template(self._source, "prompt_template") if self._source else None
        self._rendered = Metrics.counter(NAMESPACE, "prompts_rendered")

    def process(self, row: InputRow) -> Iterator[InputRow]:
        if row.failure is not None or row.item is None:
            yield row
            return
        if self._template is not None:
            self._rendered.inc()
        yield dataclasses.replace(row, prompt=render_prompt(self._template, row.item))
