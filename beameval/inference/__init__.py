"""Resilient async inference against model and agent endpoints, free of Beam so it is testable and reusable alone."""

from beameval.inference.backoff import backoff_delay, retry_wait
from beameval.inference.classify import Failure, classify, parse_retry_after
from beameval.inference.counters import CounterSnapshot
from beameval.inference.engine import InferenceEngine
from beameval.inference.errors import EmptyAnswerError, MalformedResponseError, ResponseError, UnusableResponseError
from beameval.inference.limiter import AdaptiveLimiter
from beameval.inference.outcome import Outcome
from beameval.inference.prepared import PreparedRequest, canonical_json, request_hash
from beameval.inference.retry import RetryPolicy, call_with_retries
from beameval.inference.targets import AgentHandler, ModelHandler, TargetHandler, make_handler

__all__ = [
    "AdaptiveLimiter",
    "AgentHandler",
    "CounterSnapshot",
    "EmptyAnswerError",
    "Failure",
    "InferenceEngine",
    "MalformedResponseError",
    "ModelHandler",
    "Outcome",
    "PreparedRequest",
    "ResponseError",
    "RetryPolicy",
    "TargetHandler",
    "UnusableResponseError",
    "backoff_delay",
    "call_with_retries",
    "canonical_json",
    "classify",
    "make_handler",
    "parse_retry_after",
    "request_hash",
    "retry_wait",
]
