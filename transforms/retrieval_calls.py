"""CallEndpoint: a retrieval target's requests (embeddings, reranking) through the shared engine, journal and store.

Elements are ``(tag, rendered)``: ``rendered`` is what the handler ``prepare``s (the texts
to embed or rerank), the tag comes back with the reply. With a response store or
``--resume`` (``stored``), each request is keyed as ``GenerateSamples`` keys a target's
and joined with the stored entries (``store_join``); a stored reply answers its request,
unsent, so a rerun re-embeds nothing. Every other request goes through
``transforms.endpoint_calls``, as a target's does: looked up in the run's journal just
before it is sent (a corpus batch or query that Beam runs again is not embedded twice),
then sent through the worker's ``InferenceEngine`` for its endpoint (retries, rate
limits, budget), a success journalled the moment it parses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beameval.cache.entry import StoredResponse
from beameval.cache.journal_index import row_token
from beameval.cache.key import response_key_from_content
from beameval.cache.recording import sample_from_stored
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
from transforms.cache import request_keys
from transforms.endpoint_calls import Answer, Call, CallEndpoints, CallPlan, LiveEndpoint, Planned, Ready
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


class _RetrievalCalls(CallPlan[tuple[Any, Any, StoredResponse | None], tuple[Any, EndpointReply]]):
    """``(tag, rendered, stored or None)`` -> ``(tag, EndpointReply)``: a stored reply, or the endpoint's."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self.counter_prefix = f"{endpoint.name}_"

    def setup(self, journalled: bool) -> None:
        endpoint = self._endpoint
        params = endpoint.params
        self._journalled = journalled
        self._handler = endpoint.make_handler(endpoint.access.api_key())
        self._redactor = Redactor(endpoint.access.secret_values())
        engine = InferenceEngine.for_endpoint(self._handler, endpoint.access, params, endpoint.run_id)
        self._live = LiveEndpoint(self._handler, engine, self._redactor, params.max_retries)
        self.max_pending = 2 * params.parallelism
        self._requests = Metrics.counter(NAMESPACE, f"{endpoint.name}_requests")
        self._hits = Metrics.counter(NAMESPACE, f"{endpoint.name}_cache_hits")

    def token(self, element: tuple[Any, Any, StoredResponse | None]) -> str:
        """A query's row (``(row_index, sample_index)``), or a corpus batch's number (``(number, ids)``)."""
        first, second = element[0]
        return row_token(first, second) if isinstance(second, int) else f"corpus/{first}"

    def plan(self, element: tuple[Any, Any, StoredResponse | None]) -> Planned[Any] | Ready[tuple[Any, EndpointReply]]:
        tag, rendered, stored = element
        sample = sample_from_stored(self._handler, stored)
        if sample is not None:
            self._hits.inc()
            return Ready((tag, EndpointReply(sample=sample, status=200, cached=True)))
        try:
            prepared = self._handler.prepare(rendered)
            content = canonical_json(prepared.body)
            prepared = dataclasses.replace(prepared, content=content)
        except (EvaluatorError, TypeError, ValueError) as exc:
            return Ready((tag, EndpointReply(error=str(exc), error_kind="request")))
        key = None
        if self._journalled:
            key = response_key_from_content(prepared.url, content, 0, prepared.headers, self._handler.secrets)
        self._requests.inc()
        return Planned(tag, [Call("", self._live, prepared, key, self._endpoint.model)])

    def finished(self, tag: Any, answers: Mapping[str, Answer]) -> tuple[Any, EndpointReply]:
        return tag, _reply(answers[""].outcome, self._redactor)


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
        return to_send | "Send" >> beam.ParDo(CallEndpoints(_RetrievalCalls(self._endpoint), self._journal_dir))
