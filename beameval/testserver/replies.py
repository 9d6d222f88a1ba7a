"""Deterministic OpenAI-shaped replies, so tests can predict exactly what a model "says"."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from beameval.testserver.faults import Rule

__all__ = [
    "DEFAULT_MODEL",
    "UNKNOWN_ANSWER",
    "Replier",
    "agent_response",
    "chat_response",
    "completion_response",
    "error_body",
    "prompt_text",
    "usage",
]

DEFAULT_MODEL = "test-model"
UNKNOWN_ANSWER = "I don't know."


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


def prompt_text(kind: str, body: Any) -> str:
    """Extract the text that rules match and replies echo.

    Args:
        kind: ``"chat"``, ``"completion"`` or ``"agent"``.
        body: the parsed JSON request body.

    Returns:
        For chat, the last user message (string content, or its text parts
        concatenated); for completions, ``prompt`` (the first one if a list);
        for the agent, ``input``. "" when absent.
    """
    if not isinstance(body, dict):
        return ""
    if kind == "chat":
        messages = body.get("messages")
        if isinstance(messages, list):
            for message in reversed(messages):
                if isinstance(message, dict) and message.get("role") == "user":
                    return _content_text(message.get("content"))
        return ""
    value = body.get("prompt" if kind == "completion" else "input")
    if isinstance(value, list):
        value = value[0] if value else ""
    return value if isinstance(value, str) else ""


def usage(prompt: str, reply: str | None) -> dict[str, int]:
    """Whitespace word counts of prompt and reply, in OpenAI's ``usage`` shape."""
    prompt_tokens = len(prompt.split())
    completion_tokens = len(reply.split()) if reply else 0
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class Replier:
    """Chooses reply text: echo the prompt, or look it up in a file of answers.

    Args:
        answers: ``(question, model_answer)`` pairs for ``answers`` mode; None echoes.
    """

    def __init__(self, answers: list[tuple[str, str]] | None = None) -> None:
        self.answers = answers

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Replier:
        """Load ``answers`` mode from JSONL records with ``question`` and ``model_answer``.

        Raises:
            ValueError: a line is not a JSON object with both string keys.
        """
        pairs: list[tuple[str, str]] = []
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                record = json.loads(line)
                question = record.get("question") if isinstance(record, dict) else None
                answer = record.get("model_answer") if isinstance(record, dict) else None
                if not isinstance(question, str) or not isinstance(answer, str):
                    raise ValueError(f"{path}:{number}: need string 'question' and 'model_answer'")
                pairs.append((question, answer))
        return cls(pairs)

    @property
    def mode(self) -> str:
        """``"echo"`` or ``"answers"``."""
        return "echo" if self.answers is None else "answers"

    def text(self, prompt: str, rule: Rule | None = None) -> str:
        """Return the reply for ``prompt``; a rule's ``reply`` overrides both modes."""
        if rule is not None and rule.reply is not None:
            return rule.reply
        if self.answers is None:
            return prompt
        for question, answer in self.answers:
            if question in prompt:
                return answer
        return UNKNOWN_ANSWER


def _tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fill in ``id``/``type`` and JSON-encode dict ``arguments`` as OpenAI does."""
    out = []
    for index, call in enumerate(calls):
        call = dict(call)
        call.setdefault("id", f"call_{index}")
        call.setdefault("type", "function")
        function = call.get("function")
        if isinstance(function, dict) and not isinstance(function.get("arguments", ""), str):
            call["function"] = {**function, "arguments": json.dumps(function["arguments"])}
        out.append(call)
    return out


def chat_response(
    body: dict[str, Any],
    prompt: str,
    content: str | None,
    seq: int,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Build a ``chat.completion`` object.

    Args:
        body: the request body (its ``model`` is echoed).
        prompt: the prompt text, for usage.
        content: the assistant's text; None (with tool calls) gives null content.
        seq: a per-server counter making the ``id`` unique.
        tool_calls: optional tool calls; ``finish_reason`` becomes ``tool_calls``.
    """
    message: dict[str, Any] = {"role": "assistant", "content": content}
    finish = "stop"
    if tool_calls:
        message["tool_calls"] = _tool_calls(tool_calls)
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{seq}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or DEFAULT_MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage(prompt, content),
    }


def completion_response(body: dict[str, Any], prompt: str, text: str, seq: int) -> dict[str, Any]:
    """Build a ``text_completion`` object; arguments as for :func:`chat_response`."""
    return {
        "id": f"cmpl-{seq}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model") or DEFAULT_MODEL,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}],
        "usage": usage(prompt, text),
    }


def agent_response(prompt: str, output: str) -> dict[str, Any]:
    """Build the generic agent's answer with a one-step trajectory."""
    return {
        "output": output,
        "trajectory": [{"step": 1, "tool": "search", "input": prompt}],
        "usage": usage(prompt, output),
    }


def error_body(status: int, message: str) -> dict[str, Any]:
    """An OpenAI-style error object."""
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "code": status}}
