"""Fault-injection settings and decisions, so tests can script every failure a client must survive."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from beameval.testserver.quota import QuotaConfig

__all__ = ["Action", "FaultConfig", "FaultInjector", "Outcome", "Rule"]

Action = Literal["reply", "error", "reset", "malformed", "empty"]


class Rule(BaseModel):
    """A scripted answer for prompts containing ``match``.

    Attributes:
        match: substring of the prompt text that selects this rule.
        reply: text to answer with instead of the default reply.
        status: HTTP status to fail with (>= 400), always, or only for the first
            ``fail_times`` requests of a prompt when ``fail_times`` is set.
        retry_after: seconds sent as ``Retry-After`` on this rule's errors.
        tool_calls: OpenAI ``tool_calls`` list put into chat replies.
        fail_times: fail the first N requests of each matching prompt, then answer.
        reply_fields: top-level fields set in every successful reply to a matching
            prompt (a ``usage`` of its own, an extra field of any shape), replacing
            what the reply would hold under those names.
    """

    model_config = ConfigDict(extra="forbid")

    match: str
    reply: str | None = None
    status: int | None = Field(default=None, ge=100, le=599)
    retry_after: float | None = Field(default=None, ge=0)
    tool_calls: list[dict[str, Any]] | None = None
    fail_times: int | None = Field(default=None, ge=0)
    reply_fields: dict[str, Any] | None = None


class FaultConfig(BaseModel):
    """Every fault knob of the server; all default to a well-behaved server.

    Rates are probabilities in [0, 1], drawn per request from one seeded
    ``random.Random`` so a sequential run is reproducible.

    Attributes:
        latency_ms: fixed delay before each inference answer.
        jitter_ms: extra delay drawn uniformly from [0, jitter_ms].
        error_rate: probability of answering ``error_status``.
        error_status: status used by ``error_rate`` and by rules with ``fail_times``.
        retry_after: seconds sent as ``Retry-After`` on error and capacity answers.
        capacity: at most this many requests in flight; others get 429 at once.
        stall_rate: probability of sleeping ``stall_s`` before answering.
        stall_s: length of a stall, meant to exceed the client's timeout.
        reset_rate: probability of closing the connection without any response.
        malformed_rate: probability of a 200 whose body is not JSON.
        empty_rate: probability of a 200 whose content is "".
        seed: seed of the random generator.
        rules: scripted rules; the first whose ``match`` is in the prompt wins.
        api_key: when set, inference and models requests without
            ``Authorization: Bearer <api_key>`` get 401.
        unsupported_params: body keys the "model" rejects with a 400 in OpenAI's words
            (``Unsupported parameter: 'max_tokens' is not supported with this model...``).
        models: when set, the models the server serves: a chat or completions request
            naming another gets OpenAI's 404 (``The model 'x' does not exist...``), and
            ``GET /v1/models`` lists these.
        quota: provider-style per-minute request and token limits (``testserver.quota``).
    """

    model_config = ConfigDict(extra="forbid")

    latency_ms: float = Field(default=0.0, ge=0)
    jitter_ms: float = Field(default=0.0, ge=0)
    error_rate: float = Field(default=0.0, ge=0, le=1)
    error_status: int = Field(default=503, ge=400, le=599)
    retry_after: float | None = Field(default=None, ge=0)
    capacity: int | None = Field(default=None, ge=0)
    stall_rate: float = Field(default=0.0, ge=0, le=1)
    stall_s: float = Field(default=30.0, ge=0)
    reset_rate: float = Field(default=0.0, ge=0, le=1)
    malformed_rate: float = Field(default=0.0, ge=0, le=1)
    empty_rate: float = Field(default=0.0, ge=0, le=1)
    seed: int = 0
    rules: list[Rule] = Field(default_factory=list)
    api_key: str | None = None
    unsupported_params: list[str] = Field(default_factory=list)
    models: list[str] | None = None
    quota: QuotaConfig | None = None

    def updated(self, patch: Mapping[str, Any]) -> FaultConfig:
        """Return a validated copy with the fields in ``patch`` replaced.

        Args:
            patch: field names to new values; unknown names are rejected.

        Returns:
            The new configuration; ``self`` is left unchanged.
        """
        data = self.model_dump()
        data.update(patch)
        return FaultConfig.model_validate(data)

    def find_rule(self, prompt: str) -> tuple[int, Rule] | None:
        """Return the index and rule of the first rule matching ``prompt``, if any."""
        for index, rule in enumerate(self.rules):
            if rule.match in prompt:
                return index, rule
        return None


@dataclass(slots=True)
class Outcome:
    """What the server does with one inference request.

    Attributes:
        action: reply normally, fail with ``status``, reset, or send a bad body.
        delay_s: seconds to wait before acting (latency, jitter and stalls).
        status: HTTP status for ``error``.
        retry_after: ``Retry-After`` seconds for ``error``, or None.
        rule: the matching rule, whose reply and tool calls override the default.
    """

    action: Action
    delay_s: float = 0.0
    status: int = 200
    retry_after: float | None = None
    rule: Rule | None = None


class FaultInjector:
    """Holds the live configuration, its random generator and per-prompt failure counts.

    Args:
        config: the initial configuration.
    """

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self._failures: dict[tuple[int, str], int] = {}

    def configure(self, patch: Mapping[str, Any]) -> FaultConfig:
        """Apply a partial update; a new ``seed`` restarts the random sequence."""
        self.config = self.config.updated(patch)
        if "seed" in patch:
            self.rng.seed(self.config.seed)
        return self.config

    def reset(self, config: FaultConfig | None = None) -> None:
        """Forget ``fail_times`` counts and reseed; optionally replace the configuration."""
        if config is not None:
            self.config = config
        self._failures.clear()
        self.rng.seed(self.config.seed)

    def _hit(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate

    def decide(self, prompt: str) -> Outcome:
        """Decide, at arrival, how to answer a request for ``prompt``.

        Random draws happen only for non-zero rates, in a fixed order, so a seeded
        sequential run always makes the same decisions.

        Args:
            prompt: the request's prompt text.

        Returns:
            The outcome; the caller sleeps ``delay_s`` and then acts.
        """
        cfg = self.config
        delay = cfg.latency_ms / 1000.0
        if cfg.jitter_ms > 0:
            delay += self.rng.uniform(0.0, cfg.jitter_ms) / 1000.0
        if self._hit(cfg.reset_rate):
            return Outcome("reset", delay)
        if self._hit(cfg.stall_rate):
            delay += cfg.stall_s
        found = cfg.find_rule(prompt) if cfg.rules else None
        rule: Rule | None = None
        if found is not None:
            index, rule = found
            retry = rule.retry_after if rule.retry_after is not None else cfg.retry_after
            if rule.fail_times is not None:
                key = (index, prompt)
                seen = self._failures.get(key, 0)
                if seen < rule.fail_times:
                    self._failures[key] = seen + 1
                    status = rule.status if rule.status and rule.status >= 400 else cfg.error_status
                    return Outcome("error", delay, status, retry, rule)
            elif rule.status is not None and rule.status >= 400:
                return Outcome("error", delay, rule.status, retry, rule)
        if self._hit(cfg.error_rate):
            return Outcome("error", delay, cfg.error_status, cfg.retry_after, rule)
        if self._hit(cfg.malformed_rate):
            return Outcome("malformed", delay, rule=rule)
        if self._hit(cfg.empty_rate):
            return Outcome("empty", delay, rule=rule)
        return Outcome("reply", delay, rule=rule)
