"""The preflight's real request: the first row's request, sent once through the run's own client, its answer kept.

A models listing answers even when the path the run POSTs to is wrong, the model is not
served or a parameter is refused: only the request itself tells. So the preflight sends
the first row's request as the engine would send it: the same handler, the same
``call_with_retries`` over an ``HttpClient`` set up as the engine's (headers, CA bundle,
reply cap, ``params.request_timeout``), and the endpoint's ``Pacer`` (its rate limit, and
the run's budget: a request the budget refuses is not sent). The answer is kept in memory
(``FirstAnswer``: the reply masked as the journal masks it, under the request's
``response_key``) for the run to record in its journal and answer that row from, so the
row is paid once, with what its ``x-ratelimit-*`` headers said (``HeardLimits``): the
workers' pacers start from it instead of sending one request alone to read them.

Retryable failures are retried as the run retries them (``params.max_retries``, the same
back-off), but every wait must end within ``WAIT_DEADLINE_S`` of the start. An endpoint
that answers only 429, 503 or timeouts is overloaded, not misconfigured: the result then
carries a warning and no answer, and the run goes on (it waits longer, and sends that row
itself). Anything else that is not a usable answer (a 404 from a wrong path or an unknown
model, a 400 for a refused parameter, a reply the handler cannot parse, a connection
that never works) is an ``EndpointError`` naming the URL, the status and the server's
words (the endpoint's keys masked).

Only a target is checked this way: a judge's or a remote metric's request needs the
target's answer first, so they keep the free probe (``probe``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from beameval.cache.key import prepared_key
from beameval.cache.recording import RecordingHandler
from beameval.config.access import EndpointAccess
from beameval.config.params import Params
from beameval.core.errors import EndpointError
from beameval.core.redaction import Redactor
from beameval.inference.backoff import RandomSource
from beameval.inference.classify import safe_url
from beameval.inference.engine import DEFAULT_TIMEOUT_S
from beameval.inference.http_client import HttpClient
from beameval.inference.limiter import AdaptiveLimiter
from beameval.inference.outcome import Outcome
from beameval.inference.pacing import Pacer
from beameval.inference.prepared import PreparedRequest, canonical_json
from beameval.inference.quota import EndpointQuota
from beameval.inference.ratelimit_headers import HeardLimits
from beameval.inference.retry import RetryPolicy, call_with_retries
from beameval.inference.targets.base import TargetHandler

__all__ = [
    "WAIT_DEADLINE_S",
    "FirstAnswer",
    "FirstResult",
    "HandedReply",
    "keyed",
    "rejected_credentials",
    "send_first_request",
]

#: The most the waits between the preflight's attempts may add up to, in seconds.
WAIT_DEADLINE_S = 15.0
_OVERLOAD = ("hard_overload", "soft_overload")


@dataclass(frozen=True)
class HandedReply:
    """The preflight's answer as ``GenerateSamples`` takes it: the row it answers, under which key, and the call.

    Pickled into the DoFn, so it holds the parsed reply only (not the body as received).

    Attributes:
        row_index: the row the request was built from (its sample 0 is the one answered).
        key: the request's ``response_key``: the row's own request must have it.
        outcome: the call as the engine would have returned it (the parsed reply, attempts,
            latency, status, request hash), so the row takes the path of a fresh reply.
        limits: what the reply's ``x-ratelimit-*`` headers said (none: an empty tuple of
            headers): the workers' pacers of the same endpoint start from it, so none of
            them sends a request alone to read them (``Pacer.heard_before``).
    """

    row_index: int
    key: str
    outcome: Outcome
    limits: HeardLimits | None = None


@dataclass(frozen=True)
class FirstAnswer:
    """The first row's answer: recorded in the run's journal (``JournalWriter.record``'s arguments), then used.

    Attributes:
        key: the request's ``response_key``, as ``GenerateSamples`` keys it.
        response: the reply body as received, the endpoint's keys masked.
        sample: the handler's parsed reply, as a fresh reply reaches ``GenerateSamples``.
        model: the model name the request asked for (None for an agent).
        attempts: HTTP attempts it took.
        latency_s: seconds from the first attempt to the answer.
        status: the answer's HTTP status.
        request_hash: the request's ``request_hash`` as sent.
        tokens: prompt plus completion tokens the reply reports (0 when it reports none).
        usd: what those tokens cost at the endpoint's pricing (0 without one).
        limits: the answer's ``x-ratelimit-*`` headers, for the workers' pacers.
    """

    key: str
    response: Any
    sample: dict[str, Any]
    model: str | None
    attempts: int
    latency_s: float
    status: int
    request_hash: str
    tokens: int
    usd: float
    limits: HeardLimits | None = None

    def handed(self, row_index: int) -> HandedReply:
        """The answer for ``GenerateSamples`` to answer row ``row_index`` (sample 0) with."""
        outcome = Outcome(self.sample, None, self.status, self.attempts, self.latency_s, self.request_hash)
        return HandedReply(row_index, self.key, outcome, self.limits)


@dataclass(frozen=True)
class FirstResult:
    """What the request came to: an answer, or none (not sent, or the endpoint was overloaded: ``warning``)."""

    answer: FirstAnswer | None
    warning: str | None = None


class _Kept:
    """A ``Recorder`` that keeps the one response it is given, for the journal to get later."""

    response: Any = None

    def record(self, key: str, response: Any, model: str | None) -> None:
        self.response = response


class _OutOfTime(Exception):
    """The next wait would end past the deadline."""


def keyed(handler: TargetHandler, prepared: PreparedRequest) -> tuple[PreparedRequest, str] | None:
    """The request with its wire bytes, and its ``response_key`` as ``GenerateSamples`` keys it.

    Returns:
        None when the body has no JSON form (the run fails that row with the full message).
    """
    try:
        prepared = dataclasses.replace(prepared, content=canonical_json(prepared.body))  # sent as keyed
        return prepared, prepared_key(prepared, secrets=handler.secrets)
    except (TypeError, ValueError):
        return None


async def send_first_request(
    handler: TargetHandler,
    prepared: PreparedRequest,
    key: str,
    *,
    where: str,
    model: str | None,
    access: EndpointAccess,
    params: Params,
    job: str,
    rng: RandomSource | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FirstResult:
    """Send ``prepared`` once (with retries) and keep its answer.

    Args:
        handler: the target's handler, holding the key (a fresh one: it has learned nothing).
        prepared: the first row's request, as ``keyed`` returns it.
        key: its ``response_key`` (``keyed``).
        where: the config path of the target for messages (``target.model``).
        model: the model name, stored with the answer.
        access: the endpoint's config (its rate limit, pricing, key variable; its keys are
            masked in the kept reply).
        params: the run's parameters (timeout, retries, longest wait, budget).
        job: the run's id: the request draws from the run's shared rate limit.
        rng: jitter for the back-off.
        clock: a monotonic clock in seconds, for the deadline.

    Returns:
        The answer; or none, when the budget refused it or the endpoint stayed overloaded
        (the result's warning says so).

    Raises:
        EndpointError: any other failure; its ``status`` is the last HTTP status.
    """
    quota = EndpointQuota.of(access, params, job)
    kept = _Kept()
    end = clock() + WAIT_DEADLINE_S

    async def sleep(seconds: float) -> None:
        if clock() + seconds > end:
            raise _OutOfTime
        await asyncio.sleep(seconds)

    policy = RetryPolicy(
        max_retries=params.max_retries, rng=rng or random.Random(), sleep=sleep, max_wait=params.max_retry_wait
    )
    client = HttpClient(
        1,
        params.request_timeout or DEFAULT_TIMEOUT_S,
        handler.headers,
        ca_bundle=handler.ca_bundle,
        max_response_bytes=handler.max_response_bytes,
    )
    pacer = Pacer(quota, handler.endpoint_key)
    recording = RecordingHandler(handler, kept, key, model, Redactor(access.secret_values()))
    try:
        outcome = await call_with_retries(
            client, AdaptiveLimiter(1), recording, prepared, policy, client_headers=handler.headers, pacer=pacer
        )
    except _OutOfTime:
        return FirstResult(None, _overloaded(where, f"for {WAIT_DEADLINE_S:g} s"))
    finally:
        await client.aclose()
        await pacer.aclose()
    error = outcome.error
    if error is None:
        return FirstResult(_answer(outcome, key, kept.response, model, quota, pacer.heard()))
    if error.failure_class == "budget":  # nothing was sent: the run stops at its budget as it would have
        return FirstResult(None)
    if error.failure_class in _OVERLOAD:
        return FirstResult(None, _overloaded(where, f"({error.message})"))
    if error.status in (401, 403):
        raise rejected_credentials(prepared.url, error.status, where, access)
    url = safe_url(prepared.url)
    raise EndpointError(
        f"preflight: the first row's request to the {where} endpoint (POST {url}) got no usable answer: "
        f"{error.message}",
        status=error.status,
        failure_class=error.failure_class,
        attempts=error.attempts,
        hint=_hint(error.status, where, url, model),
    )


def rejected_credentials(url: str, status: int, where: str, access: EndpointAccess) -> EndpointError:
    """The preflight's message for an endpoint that refused the credentials (HTTP 401 or 403): which key to check."""
    key_env = access.api_key_env
    holder = f"the key in ${key_env}" if key_env else f"{where}.api_key_env (no key was sent)"
    return EndpointError(
        f"preflight: {safe_url(url)} rejected the credentials (HTTP {status}).", status=status, hint=f"Check {holder}."
    )


def _answer(
    outcome: Outcome, key: str, response: Any, model: str | None, quota: EndpointQuota, limits: HeardLimits | None
) -> FirstAnswer:
    prompt, completion = outcome.prompt_tokens, outcome.completion_tokens
    prompt = prompt if isinstance(prompt, int) and prompt >= 0 else 0
    completion = completion if isinstance(completion, int) and completion >= 0 else 0
    usd = quota.pricing.cost(prompt, completion) if quota.pricing is not None else 0.0
    assert outcome.status is not None and outcome.sample is not None
    return FirstAnswer(
        key, response, outcome.sample, model, outcome.attempts, outcome.latency_s, outcome.status, outcome.request_hash,
        prompt + completion, usd, limits,
    )  # fmt: skip


def _overloaded(where: str, how: str) -> str:
    return (
        f"preflight: the {where} endpoint answered the first row's request only with overload or timeout "
        f"failures {how}; the run goes on and sends it itself (it waits longer between retries)."
    )


def _hint(status: int | None, where: str, url: str, model: str | None) -> str:
    named = f" ({model!r})" if model else ""
    if status == 404:
        return (
            f"Check {where}.url: the run POSTs to {url}, and a wrong path or a model the endpoint does not "
            f"serve{named} both answer 404."
        )
    if status in (400, 422):
        return (
            f"The endpoint refused the request itself: check the model name{named} and what the config adds to "
            "the body (params, extra_body); the reply above names what it refused."
        )
    if status is not None and 200 <= status < 300:
        setting = "response_path" if where.endswith("agent") else "format"
        return (
            f"The endpoint answered, but the run cannot use the reply: check {where}.{setting} (and max_tokens, "
            "if the answer was empty)."
        )
    return "Fix the endpoint or its URL; pass --skip_preflight if it is only reachable from the workers."
