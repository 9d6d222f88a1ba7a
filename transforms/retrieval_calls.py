"""CallEndpoint: a retrieval target's requests (embeddings, reranking) through the shared engine, journal and store.

Elements are ``(tag, rendered)``: ``rendered`` is what the handler ``prepare``s (the texts
to embed or rerank), the tag comes back with the reply. With a response store or
``--resume`` (``stored``), each request is keyed as ``GenerateSamples`` keys a target's
and joined with the stored entries (``store_join``); a stored reply answers its request,
unsent, so a rerun re-embeds nothing. Every other request goes to the worker's
``InferenceEngine`` for its endpoint (retries, rate limits, budget), and a success is
recorded in the run's journal the moment it parses (``RecordingHandler``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from beameval.cache.entry import StoredResponse
from beameval.cache.key import response_key_from_content
from beameval.cache.recording import RecordingHandler, sample_from_stored
from beameval.config.access import EndpointAccess
from beameval.config.params import Params
from beameval.core.errors import EvaluatorError
from beameval.core.records import EndpointReply
from beameval.core.redaction import Redactor
from beameval.inference.engine import InferenceEngine
from beameval.inference.outcome import Outcome
from beameval.inference.prepared import canonical_json
from beameval.inference.targets.base import TargetHandler
from transforms import NAMESPACE
from transforms.async_calls import PendingCalls, in_global_window
from transforms.cache import journal_for, request_keys
from transforms.store_join import BatchByBucket, JoinStored

__all__ = ["CallEndpoint", "Endpoint"]


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """What a call stage needs to build its handler on a worker and send through the run's engine.

    Attributes:
        name: the counters' prefix (``embeddings``, ``reranker``).
        make_handler: builds the handler from the API key (None: build only, for keys).
        access: the endpoint's key, rate limit and pricing.
        model: the model name recorded with each journal entry.
        params: the run's parameters (parallelism, retries, timeouts, budget).
        run_id: the job, for the shared rate limit and budget.
    """

    name: str
    make_handler: Callable[[str | None], TargetHandler]
    access: EndpointAccess
    model: str
    params: Params
    run_id: str


class _Key(beam.DoFn):
    """``(tag, rendered)`` -> ``(raw key or None, (tag, rendered))`` for the store join."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint

    def setup(self) -> None:
        self._handler = self._endpoint.make_handler(None)

    def process(self, element: tuple[Any, Any]) -> Iterator[tuple[bytes | None, tuple[Any, Any]]]:
        try:
            key: bytes | None = request_keys(self._handler.prepare(element[1]))[0]
        except (EvaluatorError, TypeError, ValueError):  # the call stage fails it, saying why
            key = None
        yield key, element


def _unjoined(joined: tuple[tuple[Any, Any], StoredResponse | None]) -> tuple[Any, Any, StoredResponse | None]:
    (tag, rendered), stored = joined
    return tag, rendered, stored


class _Send(beam.DoFn):
    """``(tag, rendered, stored or None)`` -> ``(tag, EndpointReply)``: a stored reply, or the endpoint's."""

    def __init__(self, endpoint: Endpoint, journal_dir: str | None) -> None:
        self._endpoint = endpoint
        self._journal_dir = journal_dir

    def setup(self) -> None:
        endpoint = self._endpoint
        params = endpoint.params
        api_key = endpoint.access.api_key()
        self._handler = endpoint.make_handler(api_key)
        self._redactor = Redactor(endpoint.access.secret_values())
        self._journal = journal_for(self._journal_dir) if self._journal_dir else None
        self._engine = InferenceEngine.for_endpoint(self._handler, endpoint.access, params, endpoint.run_id)
        self._max_pending = 2 * params.parallelism
        self._requests = Metrics.counter(NAMESPACE, f"{endpoint.name}_requests")
        self._hits = Metrics.counter(NAMESPACE, f"{endpoint.name}_cache_hits")

    def start_bundle(self) -> None:
        self._pending: PendingCalls[Any] = PendingCalls(self._max_pending)

    def process(self, element: tuple[Any, Any, StoredResponse | None]) -> Iterator[tuple[Any, EndpointReply]]:
        tag, rendered, stored = element
        sample = sample_from_stored(self._handler, stored)
        if sample is not None:
            self._hits.inc()
            yield tag, EndpointReply(sample=sample, status=200, cached=True)
            return
        try:
            prepared = self._handler.prepare(rendered)
            content = canonical_json(prepared.body)
            prepared = dataclasses.replace(prepared, content=content)
        except (EvaluatorError, TypeError, ValueError) as exc:
            yield tag, EndpointReply(error=str(exc), error_kind="request")
            return
        handler: TargetHandler = self._handler
        if self._journal is not None:
            key = response_key_from_content(prepared.url, content, 0, prepared.headers, self._handler.secrets)
            handler = RecordingHandler(self._handler, self._journal, key, self._endpoint.model, self._redactor)
        self._requests.inc()
        self._engine.send(prepared, handler, self._pending.add(tag), max_retries=self._endpoint.params.max_retries)
        yield from self._drain(block=self._pending.full)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for element in self._drain(block=True, until_empty=True):
            yield in_global_window(element)
        if self._journal is not None:
            self._journal.sync()  # every reply of the bundle is durable before its elements move on

    def _drain(self, block: bool, until_empty: bool = False) -> Iterator[tuple[Any, EndpointReply]]:
        for tag, outcome in self._pending.drain(block, until_empty):
            yield tag, _reply(outcome, self._redactor)


def _reply(outcome: Outcome, redactor: Redactor) -> EndpointReply:
    return EndpointReply(
        sample=outcome.sample,
        error=None if outcome.error is None else redactor.text(str(outcome.error)),
        error_kind=None if outcome.error is None else "endpoint",
        status=outcome.status,
        attempts=outcome.attempts,
        latency_s=outcome.latency_s,
        prompt_tokens=outcome.prompt_tokens,
        completion_tokens=outcome.completion_tokens,
        failure_class=None if outcome.error is None else outcome.error.failure_class,
    )


class CallEndpoint(beam.PTransform):
    """``(tag, rendered)`` -> ``(tag, EndpointReply)``, answered from ``stored`` when it has the reply.

    Args:
        endpoint: the endpoint and the run's settings.
        journal_dir: OUT_DIR/_responses (every success recorded); None records nothing.
        stored: the store's and journal's entries (``store_join.ReadResponses``), or None.
    """

    def __init__(self, endpoint: Endpoint, journal_dir: str | None, stored: beam.PCollection | None) -> None:
        super().__init__()
        self._endpoint = endpoint
        self._journal_dir = journal_dir
        self._stored = stored

    def expand(self, requests: beam.PCollection) -> beam.PCollection:
        if self._stored is None:
            to_send = requests | "NothingStored" >> beam.Map(lambda element: (*element, None))
        else:
            to_send = (
                requests
                | "Key" >> beam.ParDo(_Key(self._endpoint))
                | "Batch" >> beam.ParDo(BatchByBucket())
                | "JoinStored" >> JoinStored(self._stored)
                | "Unjoin" >> beam.Map(_unjoined)
            )
        return to_send | "Send" >> beam.ParDo(_Send(self._endpoint, self._journal_dir))
