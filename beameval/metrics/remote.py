"""remote: POST a templated JSON body to a scoring service and read each score by JSONPath.

An ``EndpointMetric``: ``transforms.metric_calls.CallMetricEndpoints`` sends the request
through the worker's shared inference engine (one connection pool and limiter per
endpoint, unlike the reference's new HTTP client per row) and ``score`` reads the reply.

Per score, the first match of ``json_path`` (default ``$.<name>``) is turned into a float:
numbers as they are, booleans as 1/0, numeric strings parsed. No match, or ``null``, gives
NaN; any other value (text, a list, an object) fails the row, as in the reference.
``minimum``/``maximum`` are declared bounds only and are not enforced (as in the reference).
A call that fails after ``max_retries`` retries fails the row with the endpoint's message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any

from jsonpath_ng import JSONPath
from jsonpath_ng.ext import parse as parse_jsonpath
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from beameval.config.access import EndpointAccess
from beameval.core.errors import EvaluatorError, MetricError
from beameval.core.templates import Template
from beameval.core.validators import http_url, unique
from beameval.inference.prepared import PreparedRequest
from beameval.inference.targets.base import TargetHandler, endpoint_key
from beameval.metrics.base import EndpointMetric, EndpointSettings, MetricConfig, MetricContext, register

__all__ = ["RemoteConfig", "RemoteHandler", "RemoteMetric", "RemoteScore"]


def _compile(path: str) -> JSONPath:
    try:
        return parse_jsonpath(path)
    except Exception as exc:  # the lexer and parser raise several types, some bare Exception
        raise ValueError(f"{path!r} is not a valid JSONPath: {exc}") from None


class RemoteScore(BaseModel):
    """One score read from the service's reply."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    json_path: str | None = None
    minimum: float | None = None
    maximum: float | None = None

    @field_validator("json_path")
    @classmethod
    def _valid_path(cls, path: str | None) -> str | None:
        if path is not None:
            _compile(path)
        return path

    @model_validator(mode="after")
    def _ordered(self) -> RemoteScore:
        if self.minimum is not None and self.maximum is not None and not self.minimum < self.maximum:
            raise ValueError(f"minimum ({self.minimum}) must be less than maximum ({self.maximum})")
        return self

    @property
    def path(self) -> str:
        """The JSONPath of the score: ``json_path``, else ``$.<name>``."""
        return self.json_path if self.json_path is not None else f"$.{self.name}"


class RemoteConfig(MetricConfig, EndpointAccess):
    """Config of ``type: remote``."""

    url: str
    body: dict[str, Any]
    scores: Annotated[list[RemoteScore], Field(min_length=1)]
    timeout_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 30.0
    max_retries: Annotated[int, Field(ge=0, le=100)] = 3
    parallelism: Annotated[int, Field(ge=1, le=4096)] = 8

    _url = field_validator("url")(http_url)

    @field_validator("scores")
    @classmethod
    def _unique(cls, scores: list[RemoteScore]) -> list[RemoteScore]:
        unique([score.name for score in scores], "score names")
        for score in scores:
            if score.json_path is None:
                _compile(score.path)
        return scores

    @field_validator("body")
    @classmethod
    def _compiles(cls, body: dict[str, Any]) -> dict[str, Any]:
        try:
            Template(body, "body")
        except EvaluatorError as exc:
            raise ValueError(exc.message) from None
        return body


class RemoteHandler(TargetHandler):
    """POSTs a rendered JSON body to one URL; the reply's whole JSON is the sample's ``response``.

    Args:
        config: the metric's config (URL, key header, CA bundle).
        api_key: sent in ``config.api_key_header`` when given.

    """

    def __init__(self, config: RemoteConfig, api_key: str | None) -> None:
        self.url = config.url
        self.endpoint_key = endpoint_key(config.url, "remote", api_key)
        self.headers = {"Content-Type": "application/json", "Accept": "application/json", **config.key_headers(api_key)}
        self.ca_bundle = config.ca_bundle
        self.probe_url = config.url  # a GET on a POST route: any status proves reachability and TLS
        self.max_response_bytes = config.max_response_bytes
        self.secrets = (api_key,) if api_key else ()

    def prepare(self, rendered: Any, item: Mapping[str, Any] | None = None) -> PreparedRequest:
        """Address the rendered body (a mapping) to the URL; anything else is sent as ``{"args": value}``."""
        body = dict(rendered) if isinstance(rendered, Mapping) else {"args": rendered}
        return PreparedRequest(url=self.url, body=body, headers=self.headers)

    def parse(self, status: int, json_body: Any) -> dict[str, Any]:
        """Keep the whole reply; the metric picks its scores out of it."""
        return {"response": json_body}


@register("remote")
class RemoteMetric(EndpointMetric[RemoteConfig]):
    """Scores read from a remote scoring service's JSON reply (docs/METRICS.md, `remote`)."""

    config_class = RemoteConfig

    def __init__(self, config: RemoteConfig) -> None:
        super().__init__(config)
        self._body = Template(config.body, "body")
        self._paths = [(score.name, score.path, _compile(score.path)) for score in config.scores]
        self._handler: RemoteHandler | None = None

    def output_names(self) -> list[str]:
        return [score.name for score in self.config.scores]

    def endpoint_handler(self) -> TargetHandler:
        if self._handler is None:
            self._handler = RemoteHandler(self.config, self.config.api_key())
        return self._handler

    @property
    def endpoint_access(self) -> EndpointAccess:
        return self.config

    @property
    def endpoint_settings(self) -> EndpointSettings:
        return EndpointSettings(self.config.parallelism, self.config.max_retries, self.config.timeout_seconds)

    def build_request(self, ctx: MetricContext) -> PreparedRequest:
        """Render the body over the metric context (``{**item, **sample, item, sample}``)."""
        return self.endpoint_handler().prepare(self._body.render(ctx.template_context), ctx.item)

    def score(self, ctx: MetricContext) -> dict[str, float]:
        reply = self.reply(ctx)
        if reply.error is not None or reply.sample is None:
            raise MetricError(f"the remote scorer failed: {reply.error or 'no answer'}")
        response = reply.sample.get("response")
        return {name: self._value(name, path, compiled, response) for name, path, compiled in self._paths}

    def _value(self, name: str, path: str, compiled: JSONPath, response: Any) -> float:
        matches = compiled.find(response)
        if not matches:
            return math.nan
        value = matches[0].value
        if value is None:
            return math.nan
        if isinstance(value, bool):
            return 1.0 if value else 0.0
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:80] + "…"
        raise MetricError(f"score {name!r} at {path} is not a number: {shown}")
