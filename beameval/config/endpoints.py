"""Endpoint configs: an OpenAI-compatible model or a generic agent, and the target that picks one."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from beameval.config.access import EndpointAccess
from beameval.config.batch import BatchSettings
from beameval.config.frozen import Frozen
from beameval.config.retrieval import EmbeddingsEndpoint, RetrievalTarget
from beameval.core.validators import header_fields, http_url

__all__ = ["AgentTarget", "ModelTarget", "TargetConfig"]

_AUTH_WORDS = ("auth", "token", "key", "secret", "credential", "bearer", "cookie")


_FORMAT_NOTE = (
    "openai sends the request as configured; nim (the default, as in the reference SDK, so configs written "
    "for it score the same) adds max_tokens=4096 when neither params.inference nor the request sets a token "
    "limit. Set openai for an endpoint whose own default should apply."
)


class ModelTarget(EndpointAccess):
    """An OpenAI-compatible model endpoint."""

    url: str
    name: str
    format: Annotated[Literal["openai", "nim"], Field(description=_FORMAT_NOTE)] = "nim"
    default_headers: dict[str, str] | None = None
    #: ``online`` sends each request as it comes; ``batch`` sends them through the provider's Batch API.
    mode: Literal["online", "batch"] = "online"
    batch: BatchSettings = BatchSettings()

    _url = field_validator("url")(http_url)

    @field_validator("default_headers")
    @classmethod
    def _no_credentials_in_headers(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        header_fields(headers)  # no CR/LF, no ':' in names, no Host
        for name in headers or {}:
            normalised = name.lower().replace("_", "-")
            if any(word in normalised for word in _AUTH_WORDS):
                raise ValueError(
                    f"header {name!r} looks like a credential (names containing "
                    f"{', '.join(_AUTH_WORDS)} are refused); put the key in an environment "
                    "variable and name it in api_key_env"
                )
        return headers


class AgentTarget(EndpointAccess):
    """A generic agent endpoint: POST a templated JSON body, read the answer by JSONPath."""

    url: str
    name: str = "agent"
    body: dict[str, Any]
    response_path: str
    trajectory_path: str | None = None

    _url = field_validator("url")(http_url)


class TargetConfig(Frozen):
    """Exactly one of ``model``, ``agent`` or ``retrieval``.

    Every field is a target kind: the checks, ``kind``, ``where`` and ``NamedTarget.as_target``
    read the fields, so a new kind is its config class and one field here (and its handler:
    ``beameval/inference/targets/factory.py``).
    """

    model: ModelTarget | None = None
    agent: AgentTarget | None = None
    retrieval: RetrievalTarget | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> TargetConfig:
        kinds = [kind for kind in TargetConfig.model_fields if getattr(self, kind) is not None]
        if len(kinds) != 1:
            named = [f"target.{kind}" for kind in TargetConfig.model_fields]
            raise ValueError(f"set exactly one of {', '.join(named[:-1])} or {named[-1]}")
        return self

    @property
    def kind(self) -> str:
        """The field that is set: ``model``, ``agent`` or ``retrieval``."""
        return next(kind for kind in TargetConfig.model_fields if getattr(self, kind) is not None)

    @property
    def endpoint(self) -> ModelTarget | AgentTarget | EmbeddingsEndpoint:
        """The endpoint each row's request goes to: the model or agent; a retrieval target's embeddings endpoint."""
        chosen = getattr(self, self.kind)
        return chosen.embeddings if isinstance(chosen, RetrievalTarget) else chosen

    @property
    def where(self) -> str:
        """``endpoint``'s config path (``target.model``, ``target.agent``, ``target.retrieval.embeddings``)."""
        return f"target.{self.kind}.embeddings" if self.retrieval is not None else f"target.{self.kind}"

    def api_key(self) -> str | None:
        """The API key from the environment variable named in ``api_key_env``, if any."""
        return self.endpoint.api_key()
