"""Requests to and replies from an OpenAI-compatible model (chat or completions, chosen per request)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from beameval.config.endpoints import ModelTarget
from beameval.config.params import Params
from beameval.core.errors import TemplateError
from beameval.inference.prepared import PreparedRequest
from beameval.inference.targets.base import TargetHandler, endpoint_key
from beameval.inference.targets.model_request import (
    NIM_DEFAULT_MAX_TOKENS,
    deep_merge,
    endpoint_urls,
    flatten_extra_body,
    has_token_limit,
    inject_system_prompt,
    structured_output_params,
)
from beameval.inference.targets.model_response import extract_sample

__all__ = ["ModelHandler", "as_request"]

log = logging.getLogger(__name__)

# OpenAI's reasoning models refuse max_tokens: "Unsupported parameter: 'max_tokens' is not
# supported with this model. Use 'max_completion_tokens' instead."
_MAX_TOKENS_REFUSED = re.compile(r"max_tokens\W{0,3}\s+is\s+not\s+supported|unsupported\s+parameter\W+max_tokens", re.I)


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

    #: ``extract_sample`` puts the reply one level down, and its own ``usage`` at that level.
    parse_nesting = 1

    def __init__(self, target: ModelTarget, params: Params, api_key: str | None) -> None:
        self.target = target
        self.base_url, self.chat_url, self.completions_url = endpoint_urls(target.url)
        self.endpoint_key = endpoint_key(self.base_url, target.name, api_key)
        self.probe_url = self.base_url.split("?", 1)[0].rstrip("/") + "/models"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(target.default_headers or {})
        headers.update(target.key_headers(api_key))
        self.ca_bundle = target.ca_bundle
        self.max_response_bytes = target.max_response_bytes
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
        # Set once the endpoint refuses max_tokens; from then on requests use max_completion_tokens.
        self.completion_tokens_param = False

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
        if self.completion_tokens_param:
            body = _with_completion_tokens(body)
        url = self.chat_url if "messages" in body else self.completions_url
        return PreparedRequest(url=url, body=body, headers=self.headers)

    def revise(self, prepared: PreparedRequest, status: int, body: bytes) -> PreparedRequest | None:
        """After a 400 refusing ``max_tokens``, resend it as ``max_completion_tokens`` (and keep doing so).

        The LLM judge adds ``max_tokens`` itself, so without this an OpenAI reasoning model
        as a judge would fail every row; the reference SDK switches the same way.
        """
        if status != 400 or "max_tokens" not in prepared.body or "max_completion_tokens" in prepared.body:
            return None
        if not _MAX_TOKENS_REFUSED.search(body[:4096].decode("utf-8", "replace")):
            return None
        if not self.completion_tokens_param:
            self.completion_tokens_param = True
            log.warning("%s refused max_tokens; sending max_completion_tokens instead from now on", self.target.name)
        return PreparedRequest(
            prepared.url, _with_completion_tokens(prepared.body), prepared.headers, prepared.sample_index
        )

    @property
    def learned(self) -> bool:
        """True once ``revise`` switched to ``max_completion_tokens``: requests then differ from the first built."""
        return self.completion_tokens_param

    def parse(self, status: int, json_body: Any) -> dict[str, Any]:
        """Return the sample for a 2xx reply (see ``extract_sample``)."""
        return extract_sample(json_body, self.end_token)


def _with_completion_tokens(body: dict[str, Any]) -> dict[str, Any]:
    if "max_tokens" not in body or "max_completion_tokens" in body:
        return body
    renamed = {key: value for key, value in body.items() if key != "max_tokens"}
    renamed["max_completion_tokens"] = body["max_tokens"]
    return renamed
