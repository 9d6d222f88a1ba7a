"""The first target's answers, for pairwise judges: each row meets the baseline's answer to it.

A pairwise judge (``llm-judge`` with ``pairwise: true``) compares a target's answer with
the first target's answer to the same row and sample. In a multi-target run every target
is a branch of one graph (``pipeline.graph.build_targets_graph``); ``Baseline`` is shared
by the branches, in order: the first branch hands on its answers (its own rows carry their
own answer, so its judge sees identical answers and asks nothing), and every later branch
joins its rows with them by ``row_index/sample_index`` before the judge's calls. A row the
first target has no answer for (it failed there) gets ``{}``: the judge scores it NaN.

Only ``output_text`` crosses the join, not the whole sample.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam

from beameval.core.records import GeneratedRow
from beameval.metrics.base import MetricConfig
from transforms.metric_cache import row_token

__all__ = ["Baseline", "needs_baseline"]


def needs_baseline(configs: Sequence[MetricConfig]) -> bool:
    """True when a metric is a pairwise judge, so every target's rows need the first target's answers."""
    return any(getattr(config, "pairwise", False) for config in configs)


def _answer(row: GeneratedRow) -> dict[str, Any]:
    """What a pairwise judge reads of the first target's row: its ``output_text``; ``{}`` when it has none."""
    text = row.sample.get("output_text")
    return {"output_text": text} if row.failure is None and isinstance(text, str) else {}


def _keyed_answer(row: GeneratedRow) -> tuple[str, dict[str, Any]]:
    return row_token(row), _answer(row)


def _own(row: GeneratedRow) -> GeneratedRow:
    return dataclasses.replace(row, baseline=_answer(row))


def _attach(joined: tuple[str, dict[str, Iterable[Any]]]) -> Iterator[GeneratedRow]:
    _token, groups = joined
    answer: dict[str, Any] = next(iter(groups["baseline"]), {})
    for row in groups["row"]:
        yield dataclasses.replace(row, baseline=answer)


class Baseline:
    """The first target's answers, shared by the branches of a multi-target graph (built in order)."""

    def __init__(self) -> None:
        self._answers: beam.PCollection | None = None

    def attach(self, generated: beam.PCollection) -> beam.PCollection:
        """``generated`` with ``GeneratedRow.baseline`` set; the first branch's call also records its answers."""
        if self._answers is None:
            self._answers = generated | "BaselineAnswers" >> beam.Map(_keyed_answer)
            return generated | "OwnAnswer" >> beam.Map(_own)
        keyed = generated | "KeyRows" >> beam.Map(lambda row: (row_token(row), row))
        return (
            {"row": keyed, "baseline": self._answers}
            | "JoinBaseline" >> beam.CoGroupByKey()
            | "AttachBaseline" >> beam.FlatMap(_attach)
        )
