"""The tokens a request is charged before its reply: what rate limits and budgets reserve.

An estimate, corrected when the reply's ``usage`` arrives: ``ceil(characters / 4)`` of
everything billed as input (the messages' or prompt's text and the JSON of ``tools``,
``response_format`` and the like; the whole body for agent and remote endpoints) plus the
request's ``max_tokens`` (``DEFAULT_COMPLETION_TOKENS`` when it names none).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_COMPLETION_TOKENS", "estimate_tokens"]

#: Completion tokens charged for a request that names no max_tokens.
DEFAULT_COMPLETION_TOKENS = 256
#: Request fields billed as input besides the messages: tool definitions, the response's schema, a system prompt.
_BILLED_FIELDS = ("tools", "functions", "tool_choice", "response_format", "system", "instructions")


def estimate_tokens(body: Mapping[str, Any], wire_length: int) -> tuple[int, int]:
    """(prompt, completion) tokens charged before the reply: characters / 4 rounded up, and max_tokens."""
    chars = _prompt_chars(body)
    prompt = math.ceil((wire_length if chars is None else chars) / 4)
    limit = body.get("max_tokens", body.get("max_completion_tokens"))
    completion = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0 else None
    return prompt, DEFAULT_COMPLETION_TOKENS if completion is None else completion


def _prompt_chars(body: Mapping[str, Any]) -> int | None:
    """Characters of everything billed as input (messages or prompt, tools, formats); None for other bodies."""
    chars = _text_chars(body)
    if chars is None:
        return None
    return chars + sum(len(json.dumps(body[name])) for name in _BILLED_FIELDS if body.get(name) is not None)


def _text_chars(body: Mapping[str, Any]) -> int | None:
    """Characters of the text a model reads (messages' content, or the prompt); None for other bodies."""
    messages = body.get("messages")
    if isinstance(messages, list):
        total = 0
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                total += len(content)
            elif isinstance(content, list):
                total += sum(len(part.get("text", "")) for part in content if isinstance(part, dict))
        return total
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, list):
        return sum(len(part) for part in prompt if isinstance(part, str))
    return None
