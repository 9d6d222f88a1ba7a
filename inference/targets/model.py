"""Requests to and replies from an OpenAI-compatible model (chat or completions, chosen per request)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import TemplateError
from inference.prepared import PreparedRequest
from inference.targets.base import TargetHandler, endpoint_key
from inference.targets.model_request import (
    NIM_DEFAULT_MAX_TOKENS,
    deep_merge,
    endpoint_urls,
    flatten_extra_body,
    has_token_limit,
    inject_system_prompt,
    structured_output_params,
)
from inference.targets.model_response import extract_sample
from pipeline.config import ModelTarget, Params

__all__ = ["ModelHandler", "as_request"]


def as_request(rendered: Any) -> dict[str, Any]:
    """Return the request mapping for a rendered prompt template: a string becomes ``{"prompt": text}``.

    Raises:
        TemplateError: the template rendered something other than a mapping or a string.

    """
    if isinstance(rendered, Mapping):
        return dict(rendered)
    if isinstance(rendered, str):
        return {"prompt": rendered}
    raise TemplateError(
        "prompt_template must render to a mapping (a request body such as {messages: [...]}) "
        f"or a string (a completions prompt), but it rendered a {type(rendered).__name__}."
    )


class ModelHandler(TargetHandler):
    """An OpenAI-compatible model endpoint.

    A request with ``messages`` goes to ``/chat/completions``; anything else (a
    ``prompt``) goes to ``/completions``. The body is ``{"model": name, **request}``, then:
    NIM's default ``max_tokens=4096`` when nothing sets a token limit, the system prompt,
    the deep-merged ``params.inference`` (an ``extra_body`` is flattened into the body, as
    the openai SDK does), and the structured-output keys.

    Args:
        target: the model config.
        params: the run parameters.
        api_key: the resolved API key, or None to send no Authorization header.

    """

    def __init__(self, target: ModelTarget, params: Params, api_key: str | None) -> None:
        self.target = target
        self.base_url, self.chat_url, self.completions_url = endpoint_urls(target.url)
        self.endpoint_key = endpoint_key(self.base_url, target.name, api_key)
        self.probe_url = self.base_url.split("?", 1)[0].rstrip("/") + "/models"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(target.default_headers or {})
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.headers = headers
        self.secrets = (api_key,) if api_key else ()
        self.system_prompt = params.system_prompt
        inference = params.inference.as_request_params() if params.inference is not None else {}
        self.inference = flatten_extra_body(inference)
        self.structured = (
            structured_output_params(target.format, params.structured_output)
            if params.structured_output is not None
            else {}
        )
        self.nim_default = target.format == "nim" and not has_token_limit(self.inference)
        self.end_token = params.reasoning.end_token if params.reasoning is not None else None

    def prepare(self, rendered: Any, item: Mapping[str, Any] | None = None) -> PreparedRequest:
        """Build the chat or completions request for one rendered prompt (``item`` is unused)."""
        request = as_request(rendered)
        body: dict[str, Any] = {"model": self.target.name, **request}
        if self.nim_default and not has_token_limit(request):
            body["max_tokens"] = NIM_DEFAULT_MAX_TOKENS
        if self.system_prompt:
            body = inject_system_prompt(body, self.system_prompt)
        if self.inference:
            body = deep_merge(body, self.inference)
        if self.structured:
            body = deep_merge(body, self.structured)
        if "extra_body" in body:
            body = flatten_extra_body(body)
        url = self.chat_url if "messages" in body else self.completions_url
        return PreparedRequest(url=url, body=body, headers=self.headers)

    def parse(self, status: int, json_body: Any) -> dict[str, Any]:
        """Return the sample for a 2xx reply (see ``extract_sample``)."""
        return extract_sample(json_body, self.end_token)
