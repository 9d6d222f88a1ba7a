"""RenderPrompts: render each row's ``prompt_template`` once, before the graph fans out to the targets.

Every target's stages (the store lookup, GenerateSamples, the Batch API stage) build their
request from the carried ``InputRow.prompt`` (``beameval.core.prompt``) instead of
rendering again: a multi-target run renders each row once, before the fan-out and before
``params.repeats`` (the prompt depends on neither the target nor the sample), and a
single-target run with a store no longer renders a row for its lookup and again to send
it. A single-target run without a store renders after the rows are spread over the
workers (``pipeline.graph``): carrying a rendered prompt through a shuffle (pickled and read back)
costs more CPU than rendering it, so one target gains nothing by carrying it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beameval.core.prompt import render_prompt
from beameval.core.records import InputRow
from beameval.core.templates import Template
from transforms import NAMESPACE
from transforms.row_batches import RowBatch
from transforms.worker_gc import freeze_startup_heap

__all__ = ["RenderPrompts"]


class RenderPrompts(beam.DoFn):
    """InputRow -> the same row with ``prompt`` (or ``prompt_error``) set; unreadable rows pass unchanged.

    A ``RowBatch`` (a run answered from the response store reads its rows in batches,
    ``transforms.row_batches``) gives one batch of the rendered rows.

    Counts ``prompts_rendered``: the template renders, failures included (once per row with ``targets:``,
    once per sample in a single-target run).
    """

    def __init__(self, prompt_template: str | dict[str, Any] | None) -> None:
        self._source = prompt_template

    def setup(self) -> None:
        self._template = Template(self._source, "prompt_template") if self._source else None
        self._rendered = Metrics.counter(NAMESPACE, "prompts_rendered")
        freeze_startup_heap()  # every row passes here, in the first stage after the read

    def process(self, element: InputRow | RowBatch) -> Iterator[InputRow | RowBatch]:
        rows = element if isinstance(element, list) else (element,)
        rendered = [self._render(row) for row in rows]
        if self._template is not None:  # one counter update per element: a batch's renders together
            count = sum(1 for row in rows if row.failure is None and row.item is not None)
            if count:
                self._rendered.inc(count)
        yield RowBatch(rendered) if isinstance(element, list) else rendered[0]

    def _render(self, row: InputRow) -> InputRow:
        if row.failure is not None or row.item is None:
            return row
        return render_prompt(self._template, row)
