"""One engine per endpoint per worker process: a shared connection pool and limiter fed from any thread."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import logging
import os
import random
import threading
from collections import deque
from collections.abc import Callable
from typing import ClassVar

from beameval.config.access import EndpointAccess
from beameval.config.params import Params
from beameval.core.errors import EndpointError
from beameval.inference.backoff import MAX_RETRY_WAIT_S, RandomSource
from beameval.inference.counters import CounterSnapshot, EngineCounters
from beameval.inference.http_client import HttpClient
from beameval.inference.limiter import AdaptiveLimiter
from beameval.inference.loop import background_loop, stop_background_loop
from beameval.inference.outcome import Outcome
from beameval.inference.pacing import Pacer
from beameval.inference.prepared import PreparedRequest
from beameval.inference.quota import EndpointQuota
from beameval.inference.ratelimit_headers import HeardLimits
from beameval.inference.retry import RetryPolicy, call_with_retries
from beameval.inference.targets.base import TargetHandler

__all__ = ["DEFAULT_TIMEOUT_S", "Done", "InferenceEngine"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0
#: Called once with a request's outcome, on the engine's loop thread.
Done = Callable[[Outcome], None]
_Job = tuple[PreparedRequest, TargetHandler, Done, int]


class InferenceEngine:
    """Sends requests for one endpoint from a background event loop.

    Get one with ``InferenceEngine.shared(...)``: engines are registered per
    ``handler.endpoint_key`` and process, so every DoFn instance (and the LLM judge) in a
    worker shares one aiohttp keep-alive pool (``HttpClient``, ``parallelism`` connections,
    created on the engine's loop), one ``AdaptiveLimiter`` and one ``Pacer`` (request and
    token rates, advertised limits, the run's budget) per endpoint. Settings come
    from the first ``shared`` call for a key; the TLS trust store and the reply-size cap
    come from the handler.

    Args:
        handler: a handler of this endpoint (its headers become the client's defaults).
        parallelism: the most requests in flight (the limiter's ``max_limit``).
        max_retries: default retries per request.
        request_timeout: seconds for one whole attempt (connect, send, read the full
            reply); None means 600 s.
        rng: the jitter source (a fresh ``random.Random`` when None).
        quota: the endpoint's rate limit, pricing and the run's budget (None: only the
            limits the endpoint advertises in its replies).

    """

    _registry: ClassVar[dict[str, InferenceEngine]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()
    _registry_pid: ClassVar[int] = os.getpid()

    def __init__(
        self,
        handler: TargetHandler,
        parallelism: int,
        max_retries: int,
        request_timeout: float | None,
        *,
        rng: RandomSource | None = None,
        max_retry_wait: float = MAX_RETRY_WAIT_S,
        quota: EndpointQuota | None = None,
    ) -> None:
        self.endpoint_key = handler.endpoint_key
        self._registry_key = self.endpoint_key
        self.parallelism = parallelism
        self.max_retries = max_retries
        self.request_timeout = request_timeout or DEFAULT_TIMEOUT_S
        self.max_retry_wait = max_retry_wait
        self._loop = background_loop()
        self._client = HttpClient(
            parallelism,
            self.request_timeout,
            handler.headers,
            ca_bundle=handler.ca_bundle,
            max_response_bytes=handler.max_response_bytes,
        )
        self._client_headers = handler.headers
        self.limiter = AdaptiveLimiter(parallelism, on_ramp=self._ramped)
        self.pacer = Pacer(quota or EndpointQuota(), self.endpoint_key, max_wait_s=self.request_timeout)
        self._rng = rng or random.Random()
        self._policies: dict[tuple[int, bool], RetryPolicy] = {}
        self._counters = EngineCounters()
        self._decreases_lock = threading.Lock()
        self._decreases_reported = 0
        self._inbox: deque[_Job] = deque()
        self._drain_scheduled = False
        self._active = 0  # workers running a job and not waiting to retry (see _pump)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @classmethod
    def shared(
        cls,
        handler: TargetHandler,
        parallelism: int,
        max_retries: int,
        request_timeout: float | None,
        max_retry_wait: float = MAX_RETRY_WAIT_S,
        quota: EndpointQuota | None = None,
    ) -> InferenceEngine:
        """Return this process's engine for ``handler.endpoint_key``, creating it on first use.

        Args:
            handler: the endpoint's handler.
            parallelism: the most requests in flight to the endpoint from this process.
            max_retries: default retries per request.
            request_timeout: seconds per attempt (None: 600 s).
            max_retry_wait: the longest wait between attempts (``params.max_retry_wait``).
            quota: the endpoint's rate limit, pricing and the run's budget (``EndpointQuota.of``).

        Returns:
            The shared engine for this endpoint, concurrency limit and timeout (a process
            that runs several evaluations, such as a test session, gets one per setting;
            ``max_retries`` is only a default, callers pass their own per request).

        """
        settings = (parallelism, request_timeout, handler.ca_bundle, handler.max_response_bytes, max_retry_wait, quota)
        key = "|".join(map(str, (handler.endpoint_key, *settings)))
        with cls._registry_lock:
            if cls._registry_pid != os.getpid():  # forked: the parent's engines are not ours
                cls._registry = {}
                cls._registry_pid = os.getpid()
            engine = cls._registry.get(key)
            if engine is None or engine._closed:
                engine = cls(
                    handler, parallelism, max_retries, request_timeout, max_retry_wait=max_retry_wait, quota=quota
                )
                engine._registry_key = key
                cls._registry[key] = engine
            return engine

    @classmethod
    def for_endpoint(
        cls, handler: TargetHandler, access: EndpointAccess, params: Params, job: str, heard: HeardLimits | None = None
    ) -> InferenceEngine:
        """The process's engine for a target-like endpoint: the run's ``params``, the job's quota for ``access``.

        ``heard``: what the preflight's reply advertised; the pacer starts from it (``Pacer.heard_before``).
        """
        quota = EndpointQuota.of(access, params, job)
        retries, timeout, wait = params.max_retries, params.request_timeout, params.max_retry_wait
        engine = cls.shared(handler, params.parallelism, retries, timeout, wait, quota=quota)
        if heard is not None:  # on the loop, ahead of every request this caller queues
            engine._loop.call_soon_threadsafe(engine.pacer.heard_before, heard)
        return engine

    def submit(
        self, prepared: PreparedRequest, handler: TargetHandler, *, max_retries: int | None = None
    ) -> concurrent.futures.Future[Outcome]:
        """Queue one request; thread-safe and non-blocking.

        Args:
            prepared: the request (from ``handler.prepare``).
            handler: parses the reply.
            max_retries: overrides the engine's default for this request.

        Returns:
            A future that always resolves to an ``Outcome`` (it never raises); cancelling
            it does not stop the request.

        """
        future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
        self.send(prepared, handler, functools.partial(_resolve, future), max_retries=max_retries)
        return future

    def send(
        self, prepared: PreparedRequest, handler: TargetHandler, done: Done, *, max_retries: int | None = None
    ) -> None:
        """Queue one request and call ``done(outcome)`` once it has finished; thread-safe and non-blocking.

        ``done`` runs on the engine's loop thread (or on the caller's, when the engine is
        already closed), so it must be quick and must not raise. Callers that hand the
        outcome to another thread (``transforms.async_calls.PendingCalls``) skip the
        ``concurrent.futures.Future`` that ``submit`` builds: its lock, condition and
        callback list cost about 5% of a worker's time per request.

        Args:
            prepared: the request (from ``handler.prepare``).
            handler: parses the reply.
            done: receives the request's ``Outcome`` (never an exception).
            max_retries: overrides the engine's default for this request.

        """
        if self._closed:
            done(_closed_outcome())
            return
        retries = self.max_retries if max_retries is None else max_retries
        self._inbox.append((prepared, handler, done, retries))
        # Wake the loop only when a worker can start: busy workers take queued jobs themselves
        # (read after the append: a worker that found the inbox empty has already left ``_active``).
        if not self._drain_scheduled and self._active < self.limiter.limit:
            self._drain_scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is gone (interpreter shutting down)
                self._drain_scheduled = False
                self._closed = True
                while self._inbox:
                    self._inbox.popleft()[2](_closed_outcome())

    def call(self, prepared: PreparedRequest, handler: TargetHandler, *, max_retries: int | None = None) -> Outcome:
        """Send one request and wait for its outcome (blocking; not from the engine's loop thread)."""
        return self.submit(prepared, handler, max_retries=max_retries).result()

    async def request(
        self, prepared: PreparedRequest, handler: TargetHandler, *, max_retries: int | None = None
    ) -> Outcome:
        """Run one request as a coroutine (what ``submit`` runs), for code already on the engine's loop."""
        retries = self.max_retries if max_retries is None else max_retries
        return await self._call(prepared, handler, self._policy(retries, worker=False))

    async def _call(self, prepared: PreparedRequest, handler: TargetHandler, policy: RetryPolicy) -> Outcome:
        outcome = await call_with_retries(
            self._client,
            self.limiter,
            handler,
            prepared,
            policy,
            client_headers=self._client_headers,
            pacer=self.pacer,
        )
        self._counters.add(outcome)
        return outcome

    def snapshot_counters(self) -> CounterSnapshot:
        """Return the counts since the last call (and reset them), plus the limiter's gauges; any thread."""
        snapshot = self._counters.take()
        with self._decreases_lock:
            decreases = self.limiter.decreases
            snapshot.limit_decreases = decreases - self._decreases_reported
            self._decreases_reported = decreases
        snapshot.limit = self.limiter.limit
        snapshot.in_flight = self.limiter.in_flight
        snapshot.peak_in_flight = self.limiter.peak
        return snapshot

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the requests run on."""
        return self._loop

    def close(self, timeout: float = 10.0) -> None:
        """Cancel queued and running requests (their futures get an error outcome) and close the pool."""
        with self._registry_lock:
            if self._closed:
                return
            self._closed = True
            if self._registry.get(self._registry_key) is self:
                del self._registry[self._registry_key]
        if self._loop.is_closed():
            return
        if _running_loop() is self._loop:  # called from a coroutine on our loop: cannot block it
            task = self._loop.create_task(self._shutdown())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        shutdown = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        try:
            shutdown.result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:  # pragma: no cover
            log.warning("inference engine for %s did not close cleanly: %s", self.endpoint_key, exc)

    @classmethod
    def close_all(cls) -> None:
        """Close every engine of this process and stop the background loop."""
        with cls._registry_lock:
            engines = list(cls._registry.values()) if cls._registry_pid == os.getpid() else []
        for engine in engines:
            engine.close()
        stop_background_loop()

    def _policy(self, max_retries: int, *, worker: bool) -> RetryPolicy:
        """The retry policy; a worker's (``_work``) waits through ``_backoff``."""
        key = (max_retries, worker)
        policy = self._policies.get(key)
        if policy is None:
            sleep = self._backoff if worker else asyncio.sleep
            policy = self._policies[key] = RetryPolicy(
                max_retries=max_retries, rng=self._rng, sleep=sleep, max_wait=self.max_retry_wait
            )
        return policy

    def _ramped(self) -> bool:
        """Start what a ramp step of the limiter let in; say whether jobs still wait for it."""
        self._pump()
        return bool(self._inbox)

    def _drain(self) -> None:
        self._drain_scheduled = False
        self._pump()

    def _pump(self) -> None:
        """Start a worker per queued job while the limiter has room (all of them as closed once closing).

        Jobs wait in the inbox, not as tasks parked on the limiter: a parked task cost a
        future, a wake-up and a task step per request, a third of the loop's asyncio time.
        """
        inbox = self._inbox
        if self._closed:
            while inbox:
                inbox.popleft()[2](_closed_outcome())
            return
        while inbox and self._active < self.limiter.limit:
            self._active += 1
            task = self._loop.create_task(self._work(inbox.popleft()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _work(self, job: _Job) -> None:
        """Run jobs one after another while the inbox has any and the limit allows this worker."""
        try:
            while True:
                await self._run(job)
                if self._closed or not self._inbox or self._active > self.limiter.limit:
                    return
                job = self._inbox.popleft()
                self._pump()  # the limit may have grown
        finally:
            self._active -= 1
            self._pump()

    async def _backoff(self, seconds: float) -> None:
        """A retry's wait: its worker steps aside meanwhile, so a queued job can use the free slot."""
        self._active -= 1
        self._pump()
        try:
            await asyncio.sleep(seconds)
        finally:
            self._active += 1

    async def _run(self, job: _Job) -> None:
        prepared, handler, done, retries = job
        try:
            outcome = await self._call(prepared, handler, self._policy(retries, worker=True))
        except asyncio.CancelledError:
            done(_closed_outcome())
            raise
        except BaseException as exc:  # a bug; the caller must still hear of it
            log.exception("inference request crashed")
            error = EndpointError(f"the request crashed: {type(exc).__name__}: {exc}", failure_class="fatal")
            done(Outcome(None, error, None, 0, 0.0, ""))
        else:
            done(outcome)

    async def _shutdown(self) -> None:
        self._drain()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        others = [task for task in self._tasks if task is not current]
        if others:
            await asyncio.gather(*others, return_exceptions=True)
        await self._client.aclose()
        await self.pacer.aclose()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _resolve(future: concurrent.futures.Future[Outcome], outcome: Outcome) -> None:
    try:
        future.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        pass


def _closed_outcome() -> Outcome:
    error = EndpointError(
        "the request was cancelled because the inference engine was closed", failure_class="fatal", attempts=0
    )
    return Outcome(None, error, None, 0, 0.0, "")


atexit.register(InferenceEngine.close_all)
