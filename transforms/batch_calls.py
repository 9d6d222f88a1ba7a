"""BatchCalls: the one transform that sends any kind of element's requests through a provider's Batch API.

Batch mode's ``CallEndpoints``: a ``BatchPlan`` knows one kind of element (a target's row, a
row's LLM-judge requests: ``transforms.target_batch``, ``transforms.metric_batch``), and
``BatchCalls`` does the rest alike for every kind, after the response store and journal
lookup (an answered request never goes into a batch) and before scoring:

* ``KeyBatchRequests`` keys each request the plan builds (as online mode builds and keys it)
  by ``(endpoint name, shard)``: ``shard_key``, about one full batch of rows, so no worker
  holds every request. A bundle's values of one key go as one compressed ``PackedRows`` (up
  to ``PACK_ROWS``): the local runner holds a ``GroupByKey``'s whole input. ``collect_trigger``
  adds shard 0 and the shard of every batch left live in the record, so a key's call happens
  even when the store and the journal answered all its requests;
* every key submits what it still needs, then, once all have (``submit_then_collect``), each
  polls and collects its own batches (``send_batches``, each answer journaled), so the
  provider runs every key's batches at once; a batch is charged to the run's budget before it
  is submitted (``BatchEndpoint.charge``), and its requests are skipped when it would cross it;
* each request's ``BatchOutcome`` becomes the plan's result from ``batch_answer`` (the parsed
  answer, or the reply an online call failing alike records). A request whose batch still
  runs comes out failed, not sent; the driver reads the submission record (``batch_usage``)
  and exits 75 instead of publishing.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput

from beameval.config.endpoints import ModelTarget
from beameval.core.records import EndpointReply
from beameval.inference.batch.lines import BatchRequest, custom_id
from beameval.inference.batch.runner import BatchOutcome
from beameval.inference.classify import classify
from transforms.async_calls import in_global_window
from transforms.batch_endpoint import (
    PACK_ROWS,
    BatchEndpoint,
    by_url,
    collect_trigger,
    send_batches,
    submit_then_collect,
)
from transforms.row_batches import PackedRows

__all__ = ["REQUESTS", "BatchCalls", "BatchPlan", "batch_answer"]

#: The output of ``KeyBatchRequests`` that goes to the Batch API.
REQUESTS = "requests"

#: A request as it travels in a group: ``(row index, sample index, response key, body, *what the plan keeps)``.
Request = tuple[Any, ...]


class BatchPlan(abc.ABC):
    """What one kind of element sends through the Batch API, and what each answer becomes.

    Attributes:
        label: names the stage's steps (``Key{label}BatchRequests``, ``{label}RequestsByShard``, …).
        tags: ``KeyBatchRequests``'s outputs besides ``REQUESTS`` and the main one (``done``).
    """

    label = ""
    tags: tuple[str, ...] = ()

    @abc.abstractmethod
    def endpoints(self) -> list[tuple[str, str, ModelTarget]]:
        """Its endpoints in batch mode as ``(name, scope, model)`` (``collect_trigger``); ``name`` starts their keys."""

    @abc.abstractmethod
    def setup(self) -> None:
        """Build what ``requests`` needs, on the worker (no API key: it builds, never sends)."""

    @abc.abstractmethod
    def batch_endpoints(self) -> dict[str, BatchEndpoint]:
        """Its endpoints by name, ready to send from the worker (key, budget, redaction)."""

    @abc.abstractmethod
    def requests(self, element: Any) -> Iterator[tuple[str | None, Any, Any]]:
        """``(tag, key, value)``s of ``element``; tag ``None``: the value goes on, unpacked, on the main output.

        Under ``REQUESTS`` the key is ``shard_key``'s and the value ``(url, Request)``, or
        ``(None, value)`` for a value to emit from the group's step (``result``'s output kind).
        """

    def custom_id(self, name: str, row_index: int, sample_index: int) -> str:
        """A request's ``custom_id``: its endpoint's name first, so it never reads as the target's."""
        return custom_id(row_index, sample_index, name)

    @abc.abstractmethod
    def result(self, endpoint: BatchEndpoint, name: str, url: str, request: Request, outcome: BatchOutcome) -> Any:
        """What one request's outcome becomes."""

    @abc.abstractmethod
    def emit(self, results: Iterator[Any]) -> Iterator[Any]:
        """One group's results (and values passed on), as the elements the stage emits (packed)."""


class KeyBatchRequests(beam.DoFn):
    """Elements -> their requests under ``REQUESTS``, and the plan's other outputs, packed per key and bundle."""

    def __init__(self, plan: BatchPlan) -> None:
        self._plan = plan

    def setup(self) -> None:
        self._plan.setup()

    def start_bundle(self) -> None:
        self._packs: dict[tuple[str, Any], PackedRows] = {}

    def process(self, element: Any) -> Iterator[Any]:
        for tag, key, value in self._plan.requests(element):
            if tag is None:
                yield value
                continue
            pack = self._packs.setdefault((tag, key), PackedRows())
            pack.append(value)
            if len(pack) >= PACK_ROWS:
                yield TaggedOutput(tag, (key, self._packs.pop((tag, key))))

    def finish_bundle(self) -> Iterator[TaggedOutput]:
        for (tag, key), pack in self._packs.items():
            yield TaggedOutput(tag, in_global_window((key, pack)))


def _passed_on(grouped: Iterable[PackedRows | None], through: list[Any]) -> Iterator[tuple[str, Request] | None]:
    """The group's ``(url, request)``s (and trigger) out of their packs; the values to pass on go into ``through``."""
    for pack in grouped:
        if pack is None:  # the collect trigger
            yield None
            continue
        for item in pack:
            if item[0] is None:
                through.append(item[1])
            else:
                yield item


class RunBatches(beam.DoFn):
    """``((name, shard), packs)`` -> the plan's results, once its requests went through their batches.

    Without ``collect`` it only submits, and emits nothing (``submit_then_collect``).
    """

    def __init__(self, plan: BatchPlan, journal_dir: str, output: str, collect: bool) -> None:
        self._plan = plan
        self._journal_dir = journal_dir
        self._output = output
        self._collect = collect

    def setup(self) -> None:
        self._endpoints = self._plan.batch_endpoints()

    def process(self, keyed: tuple[tuple[str, int], Iterable[PackedRows | None]], _submitted: Any = None) -> Any:
        return self._plan.emit(self._results(keyed))

    def _results(self, keyed: tuple[tuple[str, int], Iterable[PackedRows | None]]) -> Iterator[Any]:
        """The key's values passed on, then its requests' results (none without ``collect``)."""
        (name, shard), grouped = keyed
        endpoint = self._endpoints[name]
        through: list[Any] = []
        requests_by_url = by_url(_passed_on(grouped, through), endpoint.model.url)
        if self._collect:
            yield from through
        for url, found in requests_by_url.items():
            requests: list[Request] = sorted(found, key=lambda r: (r[0], r[1]))
            batch = [BatchRequest(self._plan.custom_id(name, r[0], r[1]), r[2], r[3]) for r in requests]
            outcomes = send_batches(endpoint, url, batch, self._journal_dir, self._output, shard, self._collect)
            if self._collect:
                for line, request in zip(batch, requests, strict=True):
                    yield self._plan.result(endpoint, name, url, request, outcomes[line.custom_id])
                endpoint.settle_collected()  # every answer's usage is recorded: the collected batches' holds give way


def batch_answer(endpoint: BatchEndpoint, outcome: BatchOutcome, pending: str) -> dict[str, Any] | EndpointReply:
    """The handler's parsed answer, or the reply an online call failing alike records (``attempts``: batches).

    ``pending``: the error of a request whose batch is still running, as its kind says it.
    A skipped request's reply has ``failure_class`` ``budget`` (as an online call the budget refused).
    """
    attempts = outcome.submissions
    if outcome.skipped:
        message = "not sent: its batch would have passed the run's budget (params.budget)"
        return EndpointReply(error=message, error_kind="endpoint", attempts=attempts, failure_class="budget")
    if outcome.pending:
        return EndpointReply(error=pending, error_kind="endpoint", attempts=attempts)
    if outcome.failure is not None:
        failure = outcome.failure
        kind = classify(failure.status).failure_class if failure.status is not None else "fatal"
        error = endpoint.redactor.text(failure.error)
        return EndpointReply(
            error=error, error_kind="endpoint", status=failure.status, attempts=attempts, failure_class=kind
        )
    try:
        sample: dict[str, Any] = endpoint.handler.parse(200, outcome.body)
    except Exception as exc:  # noqa: BLE001 - a reply that does not parse fails its call, as online
        message = endpoint.redactor.text(classify(exc).message)
        return EndpointReply(error=message, error_kind="endpoint", status=200, attempts=attempts, failure_class="fatal")
    return sample


class BatchCalls(beam.PTransform):
    """Elements -> what their plan makes of them, every request answered through the Batch API.

    ``expand`` gives ``results``'s output; a plan with outputs of its own (a judge's waiting
    rows) joins them in a subclass's ``expand`` from ``batches``.
    """

    def __init__(self, plan: BatchPlan, journal_dir: str, output: str) -> None:
        super().__init__()
        self._plan = plan
        self._journal_dir = journal_dir
        self._output = output

    def expand(self, elements: beam.PCollection[Any]) -> beam.PCollection[Any]:
        return self.batches(elements)[1]

    def batches(self, elements: beam.PCollection[Any]) -> tuple[Any, beam.PCollection[Any]]:
        """``KeyBatchRequests``'s outputs, and the results of every key's batches."""
        plan, label, journal, output = self._plan, self._plan.label, self._journal_dir, self._output
        keying = beam.ParDo(KeyBatchRequests(plan)).with_outputs(REQUESTS, *plan.tags, main="done")
        keyed = elements | f"Key{label}BatchRequests" >> keying
        trigger = collect_trigger(elements.pipeline, plan.endpoints(), journal, f"Collect{label}Trigger")
        grouped = (keyed[REQUESTS], trigger) | "WithTrigger" >> beam.Flatten()
        grouped = grouped | f"{label}RequestsByShard" >> beam.GroupByKey()
        step = f"{label}Batches"
        return keyed, submit_then_collect(grouped, lambda collect: RunBatches(plan, journal, output, collect), step)
