"""One request with its own retries, back-off and limiter feedback: the engine's hot path, reusable on any loop."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from beameval.config.access import is_credential_header
from beameval.core.errors import EndpointError
from beameval.inference.backoff import MAX_RETRY_WAIT_S, RandomSource, retry_wait, wait_too_long
from beameval.inference.budget import BudgetExhausted
from beameval.inference.classify import Failure, classify, safe_url
from beameval.inference.limiter import AdaptiveLimiter
from beameval.inference.not_sent import NotSent
from beameval.inference.outcome import Outcome
from beameval.inference.pacing import Charge, Pacer
from beameval.inference.prepared import PreparedRequest, canonical_json, request_hash_from_bytes, wire_bytes
from beameval.inference.targets.base import TargetHandler

__all__ = ["PostClient", "Reply", "RetryPolicy", "call_with_retries", "header_secrets"]


class Reply(Protocol):
    """What the retry loop reads from a reply (``http_client.HttpReply``)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...


class PostClient(Protocol):
    """What the retry loop needs from an HTTP client (``http_client.HttpClient``; tests may pass their own)."""

    async def post(self, url: str, *, content: bytes, headers: Mapping[str, str] | None = None) -> Reply:
        """POST ``content`` and return the fully read response."""
        ...


@dataclass(frozen=True)
class RetryPolicy:
    """How one request is retried.

    Attributes:
        max_retries: retries after the first attempt (attempts = max_retries + 1).
        rng: the jitter source.
        sleep: awaited between attempts (inject a fake in tests).
        clock: a monotonic clock in seconds, for latency.
        max_wait: the longest wait between attempts (``params.max_retry_wait``); a
            ``Retry-After`` longer than this fails the request at once.

    """

    max_retries: int = 3
    rng: RandomSource = field(default_factory=random.Random)
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
    clock: Callable[[], float] = time.perf_counter
    max_wait: float = MAX_RETRY_WAIT_S


async def call_with_retries(
    client: PostClient,
    limiter: AdaptiveLimiter,
    handler: TargetHandler,
    prepared: PreparedRequest,
    policy: RetryPolicy,
    *,
    client_headers: Mapping[str, str] | None = None,
    pacer: Pacer | None = None,
) -> Outcome:
    """Send ``prepared`` until it succeeds, fails for good, or runs out of retries.

    Each attempt holds one limiter slot and feeds its result back to the limiter. A
    retryable failure waits ``retry_wait`` (never less than ``Retry-After``) outside the
    slot. Nothing is raised (except cancellation): failures come back as ``Outcome.error``.

    Args:
        client: the shared HTTP client (see ``PostClient``).
        limiter: the endpoint's limiter.
        handler: parses 2xx replies; its ``secrets`` are masked in messages.
        prepared: the request.
        policy: retries, jitter and clocks.
        client_headers: the headers the client already sends by default; when
            ``prepared.headers`` equals them, none are passed per request.
        pacer: the endpoint's rate and budget gate: each attempt waits for it before
            taking a slot and is corrected by its reply; a refusal ends the request
            unsent: ``failure_class`` ``"budget"`` (the run's budget), ``"quota_store"``
            (the shared rate limit's Redis was lost) or ``"fatal"`` (a wait too long).

    Returns:
        The outcome; ``attempts`` counts HTTP attempts.

    """
    url = prepared.url
    try:
        content = wire_bytes(prepared)
    except (TypeError, ValueError) as exc:
        error = EndpointError(f"the request body cannot be sent as JSON: {exc}", failure_class="fatal", attempts=0)
        return Outcome(None, error, None, 0, 0.0, "")
    digest = request_hash_from_bytes(url, content)
    same = client_headers is not None and (prepared.headers is client_headers or prepared.headers == client_headers)
    headers = None if same else prepared.headers
    secrets = (*handler.secrets, *header_secrets(handler.headers, handler.secrets))
    clock = policy.clock
    max_attempts = policy.max_retries + 1
    classes: list[str] = []
    started: float | None = None
    attempt = 0
    revised = False
    while True:
        attempt += 1
        status: int | None = None
        sample: dict[str, Any] | None = None
        better: PreparedRequest | None = None
        charge: Charge | None = None
        reply_headers: Mapping[str, str] | None = None
        if pacer is not None:
            try:
                charge = await pacer.admit(prepared.body, len(content))
            except (BudgetExhausted, NotSent) as exc:
                kind, hint = ("budget", None) if isinstance(exc, BudgetExhausted) else (exc.failure_class, exc.hint)
                error = EndpointError(str(exc), failure_class=kind, attempts=attempt - 1, hint=hint)
                latency = 0.0 if started is None else clock() - started
                return Outcome(None, error, None, attempt - 1, latency, digest, None, None, tuple(classes))
        async with limiter.slot():
            if charge is not None:
                charge.in_flight = limiter.in_flight
            if started is None:
                started = clock()
            try:
                response = await client.post(url, content=content, headers=headers)
            except Exception as exc:  # classified below; cancellation propagates
                failure: Failure | None = classify(exc, url=url, secrets=secrets)
            except BaseException:  # cancelled: the attempt's charge is settled as unanswered
                if charge is not None and pacer is not None:
                    pacer.settle(charge, None, None, None)
                raise
            else:
                reply_headers = response.headers
                status = response.status_code
                if 200 <= status < 300:
                    try:
                        sample = handler.parse_reply(status, response.content)
                        failure = None
                    except Exception as exc:  # malformed JSON, missing fields, empty answer
                        failure = classify(exc, url=url, secrets=secrets)
                else:
                    failure = classify(
                        status, url=url, headers=response.headers, body=response.content, secrets=secrets
                    )
                    if not failure.retryable and not revised:
                        better = handler.revise(prepared, status, response.content)
            limiter.record(failure)
        if charge is not None and pacer is not None:
            pacer.settle(charge, reply_headers, status, _usage(sample))
        if failure is None:
            assert sample is not None
            usage = sample.get("usage")
            if not isinstance(usage, dict):  # a reply's "usage" may be anything; counts are checked downstream
                usage = None
            return Outcome(
                sample,
                None,
                status,
                attempt,
                clock() - started,
                digest,
                usage.get("prompt_tokens") if usage else None,
                usage.get("completion_tokens") if usage else None,
                tuple(classes),
            )
        classes.append(failure.failure_class)
        if better is not None:  # the endpoint said what to change: resend once, no retry spent
            prepared, better, revised = better, None, True
            content = canonical_json(prepared.body)
            digest = request_hash_from_bytes(url, content)
            max_attempts += 1
            continue
        if failure.retryable and attempt < max_attempts and wait_too_long(failure, policy.max_wait):
            error = _wait_refused(failure, attempt, policy.max_wait, status)
            return Outcome(None, error, status, attempt, clock() - started, digest, None, None, tuple(classes))
        if not failure.retryable or attempt >= max_attempts:
            error = _final_error(failure, attempt, url, status)
            return Outcome(None, error, status, attempt, clock() - started, digest, None, None, tuple(classes))
        await policy.sleep(retry_wait(failure, attempt, policy.rng, policy.max_wait))


def _usage(sample: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    usage = sample.get("usage") if sample is not None else None
    return usage if isinstance(usage, Mapping) else None


def header_secrets(headers: Mapping[str, str], secrets: Iterable[str] = ()) -> tuple[str, ...]:
    """The values of the credential headers sent (``access.is_credential_header``), to mask in messages.

    Other header values (a deployment selector, a cache switch) are not secrets and stay readable.
    """
    return tuple(value for name, value in headers.items() if is_credential_header(name, value, secrets))


def _wait_refused(failure: Failure, attempts: int, max_wait: float, status: int | None) -> EndpointError:
    """The endpoint asked for a longer wait than the run allows: fail now, quoting what it asked."""
    assert failure.retry_after is not None
    return EndpointError(
        f"{failure.message}: the endpoint asked to wait {failure.retry_after:g} s before retrying "
        f"(Retry-After), longer than params.max_retry_wait ({max_wait:g} s), so the request was given up "
        f"after {attempts} attempt{'s' if attempts != 1 else ''}.",
        status=failure.status if failure.status is not None else status,
        failure_class=failure.failure_class,
        attempts=attempts,
        hint="Rerun later, or raise params.max_retry_wait to wait that long.",
    )


def _final_error(failure: Failure, attempts: int, url: str, status: int | None) -> EndpointError:
    if attempts == 1:
        message = failure.message
    elif failure.retryable:
        message = f"request failed after {attempts} attempts: {failure.message}"
    else:
        message = f"{failure.message} (on attempt {attempts})"
    return EndpointError(
        message,
        status=failure.status if failure.status is not None else status,
        failure_class=failure.failure_class,
        attempts=attempts,
        hint=_hint(failure, url),
    )


def _hint(failure: Failure, url: str) -> str | None:
    status = failure.status
    if status in (401, 403):
        return "Check the API key (the variable named by api_key_env) and its permissions."
    if status == 404:
        return f"Check the target URL ({safe_url(url)}) and the model name."
    if failure.failure_class == "hard_overload":
        return "The endpoint is overloaded: lower params.parallelism or raise params.max_retries."
    if failure.failure_class == "soft_overload":
        return "The endpoint is slow: raise params.request_timeout or lower params.parallelism."
    return None
