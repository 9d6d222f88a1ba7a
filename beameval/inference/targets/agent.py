"""Requests to and replies from a generic agent: a templated JSON body in, an answer picked by JSONPath out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonpath_ng import JSONPath
from jsonpath_ng.ext import parse as parse_jsonpath

from beameval.config.endpoints import AgentTarget
from beameval.core.errors import ConfigError
from beameval.core.templates import Template
from beameval.inference.errors import EmptyAnswerError, UnusableResponseError
from beameval.inference.prepared import PreparedRequest
from beameval.inference.targets.base import TargetHandler, endpoint_key
from beameval.inference.targets.model import as_request

__all__ = ["AgentHandler", "compile_path"]

_EXCERPT = 200


def compile_path(path: str, field: str) -> JSONPath:
    """Compile a JSONPath (jsonpath-ng's extended syntax).

    Raises:
        ConfigError: the path does not parse.

    """
    try:
        return parse_jsonpath(path)
    except Exception as exc:  # JsonPathLexerError, JsonPathParserError, and bare Exceptions from the lexer
        raise ConfigError(f"target.agent.{field} {path!r} is not a valid JSONPath: {exc}.") from None


class AgentHandler(TargetHandler):
    """A generic agent endpoint.

    The body template renders against ``{**item, "item": item, **request, "request":
    request}``, where ``request`` is the rendered prompt template (a string becomes
    ``{"prompt": text}``; no template gives ``{}``). A non-mapping body is sent as
    ``{"args": value}``. The answer is the first match of ``response_path``, as text
    (mappings and lists as JSON); ``trajectory_path``'s first match becomes the sample's
    ``trajectory``. ``params.system_prompt``, ``inference``, ``reasoning`` and
    ``structured_output`` apply to model targets only.

    Args:
        target: the agent config.
        api_key: sent in ``target.api_key_header`` when given.

    """

    #: The trajectory goes one level down; the sample's own ``response`` is five levels deep.
    parse_nesting = 5

    def __init__(self, target: AgentTarget, api_key: str | None) -> None:
        self.target = target
        self.url = target.url
        self.endpoint_key = endpoint_key(target.url, target.name, api_key)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(target.key_headers(api_key))
        self.ca_bundle = target.ca_bundle
        self.probe_url = target.url  # a GET on a POST route: any status proves reachability and TLS
        self.max_response_bytes = target.max_response_bytes
        self.headers = headers
        self.secrets = (api_key,) if api_key else ()
        self.body_template = Template(target.body, "target.agent.body")
        self.response_path = compile_path(target.response_path, "response_path")
        self.trajectory_path = (
            compile_path(target.trajectory_path, "trajectory_path") if target.trajectory_path else None
        )

    def prepare(self, rendered: Any, item: Mapping[str, Any] | None = None) -> PreparedRequest:
        """Render the body for one row and address it to the agent URL."""
        request = {} if rendered is None else as_request(rendered)
        context: dict[str, Any] = {}
        if item is not None:
            context.update(item)
            context["item"] = item
        context.update(request)
        context["request"] = request
        body = self.body_template.render(context)
        if not isinstance(body, dict):
            body = {"args": body}
        return PreparedRequest(url=self.url, body=body, headers=self.headers)

    def parse(self, status: int, json_body: Any) -> dict[str, Any]:
        """Return the sample for a 2xx agent reply.

        Raises:
            UnusableResponseError: ``response_path`` matches nothing (not retryable).
            EmptyAnswerError: the matched answer is null or empty.

        """
        matches = self.response_path.find(json_body)
        if not matches:
            raise UnusableResponseError(
                f"the agent's reply has no value at response_path {self.target.response_path!r}; "
                f"reply starts: {_excerpt(json_body)}"
            )
        answer = _as_text(matches[0].value)
        if not answer:
            raise EmptyAnswerError(f"the agent returned an empty answer at response_path {self.target.response_path!r}")
        sample: dict[str, Any] = {
            "output_text": answer,
            "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]},
        }
        if self.trajectory_path is not None:
            found = self.trajectory_path.find(json_body)
            if found:
                sample["trajectory"] = found[0].value
        return sample


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _excerpt(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"
