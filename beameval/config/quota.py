"""Provider quotas and costs on an endpoint (``rate_limit``, ``pricing``) and the run's ``params.budget``.

Every endpoint config (model and agent targets, judge models, remote metrics) carries the
same two optional sections through ``EndpointAccess``; the run's budget is one section of
``params``. Pure data and checks: pacing lives in ``beameval.inference.pacing``.
"""

from __future__ import annotations

import math
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from beameval.config.frozen import Frozen
from beameval.core.validators import env_var_name

__all__ = ["Budget", "Pricing", "RateLimit"]

_SHARED_SCHEMES = ("redis", "rediss")


class RateLimit(Frozen):
    """``rate_limit:`` of one endpoint: requests and tokens per minute for the whole job.

    Attributes:
        requests_per_minute: R, for every worker process of the job together.
        tokens_per_minute: T (prompt + completion tokens), for the whole job.
        shared: ``redis://[USER@]HOST:PORT/DB`` (or ``rediss://``): every worker draws from
            one budget kept there; without it each of W workers keeps R/W and T/W. A user
            name (a Redis ACL user) may be in the URL, a password never.
        shared_key: the name of the budget in Redis. Unset, it is per endpoint and per
            run, so two jobs never share one; two jobs that set the same name share it.
        shared_password_env: the environment variable holding the Redis password (AUTH),
            never the password itself (a password in the URL is refused).
        shared_timeout: seconds a worker may go without reaching that Redis before the
            run stops (``stopped: "quota_store"``); meanwhile the worker sends nothing new
            to the endpoint, so the job never passes its rate while Redis is away.

    """

    requests_per_minute: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    tokens_per_minute: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    shared: str | None = None
    shared_key: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")] | None = None
    shared_password_env: str | None = None
    shared_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 120.0

    _password_env = field_validator("shared_password_env")(env_var_name)

    @field_validator("shared")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.password is not None:  # checked first: never echo a password
            raise ValueError(
                "must not carry a password (user:password@host); name the environment variable holding the "
                "Redis password in rate_limit.shared_password_env (a user name alone, redis://USER@HOST, is fine)"
            )
        if parts.username == "":
            raise ValueError("has an empty user name before '@': write redis://USER@HOST:PORT/DB or drop the '@'")
        if parts.scheme not in _SHARED_SCHEMES or not parts.hostname:
            raise ValueError(f"must be a redis://[USER@]HOST:PORT/DB (or rediss://) URL, got {url!r}")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise ValueError(f"has an invalid port in {parts.netloc!r}") from None
        database = parts.path.strip("/")
        if database and not database.isdigit():
            raise ValueError(f"the database after the host must be a number (redis://HOST:PORT/0), got {database!r}")
        return url

    @model_validator(mode="after")
    def _something_to_share(self) -> RateLimit:
        if self.shared is not None and self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ValueError("shared needs requests_per_minute or tokens_per_minute: there is no budget to share")
        if self.shared is None and "shared_timeout" in self.model_fields_set:
            raise ValueError("shared_timeout applies only with shared (the Redis whose absence it times)")
        return self


class Pricing(Frozen):
    """``pricing:`` of one endpoint, in US dollars per million tokens.

    Attributes:
        input_per_million: the price of a million prompt tokens.
        output_per_million: the price of a million completion tokens.
        batch_discount: the share taken off for requests sent through a provider's Batch
            API (0.5 is half price); 0 unless set, so a cost is never under-reported.

    """

    input_per_million: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    output_per_million: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    batch_discount: Annotated[float, Field(ge=0, le=1)] = 0.0

    def cost(self, prompt_tokens: float, completion_tokens: float, *, batch: bool = False) -> float:
        """What ``prompt_tokens`` in and ``completion_tokens`` out cost, in dollars (discounted for ``batch``)."""
        full = (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1e6
        return full * (1.0 - self.batch_discount) if batch else full


class Budget(Frozen):
    """``params.budget:``: the most the run may spend, over every endpoint together.

    Attributes:
        max_tokens: prompt + completion tokens of every request sent.
        max_usd: dollars, from each endpoint's ``pricing`` (endpoints without it cost 0).

    """

    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_usd: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None

    @field_validator("max_usd")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number of dollars")
        return value
