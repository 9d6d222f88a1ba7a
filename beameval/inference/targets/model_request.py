"""Request-body rules for OpenAI-compatible model targets (reference sections 4.1-4.4), as pure functions."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from beameval.core.errors import ConfigError

__all__ = [
    "NIM_DEFAULT_MAX_TOKENS",
    "deep_merge",
    "endpoint_urls",
    "flatten_extra_body",
    "has_token_limit",
    "inject_system_prompt",
    "structured_output_params",
]

log = logging.getLogger(__name__)

NIM_DEFAULT_MAX_TOKENS = 4096
_TOKEN_LIMIT_KEYS = ("max_tokens", "max_completion_tokens")
_SUFFIXES = ("/chat/completions", "/completions")


def endpoint_urls(url: str) -> tuple[str, str, str]:
    """Split a model URL into its base and the two endpoint URLs.

    The URL may be a base (``http://h/v1``) or a full ``…/chat/completions`` or
    ``…/completions`` URL; the suffix is stripped. A query string is kept and appended to
    both endpoint URLs (the reference drops it, or breaks the path with it).

    Returns:
        ``(base_url_without_query, chat_completions_url, completions_url)``.

    """
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    for suffix in _SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)].rstrip("/")
            break
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    query = f"?{parts.query}" if parts.query else ""
    return base, f"{base}/chat/completions{query}", f"{base}/completions{query}"


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Return a new dict: ``overlay`` merged into ``base``, recursively over dicts; overlay wins on leaves.

    Neither input is modified; containers taken from ``overlay`` are copied.
    """
    merged = dict(base)
    for key, value in overlay.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = _copy(value)
    return merged


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def has_token_limit(*requests: Mapping[str, Any] | None) -> bool:
    """Return True when any of the mappings sets ``max_tokens`` or ``max_completion_tokens``."""
    return any(
        request is not None and any(request.get(key) is not None for key in _TOKEN_LIMIT_KEYS) for request in requests
    )


def inject_system_prompt(body: dict[str, Any], system_prompt: str) -> dict[str, Any]:
    """Add the run's system prompt to a request body (a new dict; ``body`` is not modified).

    * chat: prefixed, with a space, to a leading system message, else inserted as one;
    * completions: prefixed, with a space, to the prompt;
    * anything else: left alone, with a warning.
    """
    messages = body.get("messages")
    if isinstance(messages, list):
        first = messages[0] if messages else None
        if isinstance(first, Mapping) and first.get("role") == "system":
            content = first.get("content")
            if isinstance(content, list):  # content parts
                new_content: Any = [{"type": "text", "text": system_prompt}, *content]
            else:
                new_content = system_prompt if content in (None, "") else f"{system_prompt} {content}"
            new_messages = [{**first, "content": new_content}, *messages[1:]]
        else:
            new_messages = [{"role": "system", "content": system_prompt}, *messages]
        return {**body, "messages": new_messages}
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return {**body, "prompt": f"{system_prompt} {prompt}"}
    log.warning("system_prompt ignored: the request has neither 'messages' nor a string 'prompt'")
    return body


def structured_output_params(model_format: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the request keys that ask for JSON matching ``config['schema']``.

    * openai: ``response_format = {type: json_schema, json_schema: {name, schema, strict}}``
      (name defaults to ``structured_output``, strict to False);
    * nim: ``nvext = {guided_json: schema}`` at the top level of the body, which is what
      the openai SDK's ``extra_body={"nvext": …}`` puts on the wire.

    Raises:
        ConfigError: the config has no valid JSON Schema, or the format is unknown.

    """
    schema = config.get("schema") if isinstance(config, Mapping) else None
    if not isinstance(schema, Mapping):
        raise ConfigError(
            "params.structured_output must be a mapping with a 'schema' key holding a JSON Schema "
            "object, e.g. {schema: {type: object, properties: {answer: {type: string}}}}."
        )
    _check_schema(schema)
    if model_format == "openai":
        name = config.get("name") or "structured_output"
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": _copy(schema), "strict": bool(config.get("strict", False))},
            }
        }
    if model_format == "nim":
        return {"nvext": {"guided_json": _copy(schema)}}
    raise ConfigError(f"structured_output is not supported for model format {model_format!r}.")


def _check_schema(schema: Mapping[str, Any]) -> None:
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema is optional
        return
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"params.structured_output.schema is not a valid JSON Schema: {exc.message}.") from None


def flatten_extra_body(body: dict[str, Any]) -> dict[str, Any]:
    """Merge a mapping ``extra_body`` key into the top level, as the openai SDK does on the wire."""
    extra = body.get("extra_body")
    if not isinstance(extra, Mapping):
        return body
    rest = {key: value for key, value in body.items() if key != "extra_body"}
    return deep_merge(rest, extra)
