"""Turning an OpenAI-compatible reply into a sample (reference sections 4.3 and 4.5)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beameval.inference.errors import EmptyAnswerError, MalformedResponseError

__all__ = ["extract_sample", "split_reasoning"]

_REASONING_FIELDS = ("reasoning_content", "reasoning")


def split_reasoning(text: str, end_token: str) -> tuple[str | None, str]:
    """Split at the LAST ``end_token``.

    Returns:
        ``(reasoning, answer)``: the text up to and including the token, and the rest
        (not stripped); ``(None, text)`` when the token does not occur.

    """
    index = text.rfind(end_token)
    if index < 0:
        return None, text
    cut = index + len(end_token)
    return text[:cut], text[cut:]


def extract_sample(data: Any, end_token: str | None = None) -> dict[str, Any]:
    """Return the sample for one chat or completions reply.

    The output text is ``choices[0].message.content``, else ``choices[0].text``. With
    ``end_token``, reasoning before the last token moves to ``reasoning_content`` (and the
    reply's message/text is updated in place to match); a message-level
    ``reasoning_content``/``reasoning`` field is always copied there too.

    Args:
        data: the decoded reply (modified in place by the reasoning split).
        end_token: the reasoning end marker, e.g. ``</think>``.

    Returns:
        ``{"output_text", "response", "reasoning_content"?, "usage"?}``; ``output_text`` is
        ``""`` for a reply made only of tool calls.

    Raises:
        MalformedResponseError: no ``choices``, or ``choices[0]`` has neither a message nor text.
        EmptyAnswerError: the answer is empty or null and there are no tool calls.

    """
    if not isinstance(data, dict):
        raise MalformedResponseError(f"expected a JSON object, got {type(data).__name__}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedResponseError("it has no choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedResponseError("choices[0] is not an object")
    message = choice.get("message")
    holder: dict[str, Any]
    if isinstance(message, dict):
        holder, key = message, "content"
    elif "text" in choice:
        holder, key = choice, "text"
    else:
        raise MalformedResponseError("choices[0] has neither a message nor text")
    text = _as_text(holder.get(key))
    reasoning_parts = [holder[f] for f in _REASONING_FIELDS if isinstance(holder.get(f), str) and holder[f]]
    if end_token and text:
        reasoning, answer = split_reasoning(text, end_token)
        if reasoning is not None:
            reasoning_parts.append(reasoning)
            text = answer
            holder[key] = answer
            holder["reasoning_content"] = "\n".join(reasoning_parts)
    if not text:
        if holder is message and message.get("tool_calls"):
            text = ""
        else:
            raise EmptyAnswerError(_empty_message(choice))
    sample: dict[str, Any] = {"output_text": text, "response": data}
    if reasoning_parts:
        sample["reasoning_content"] = "\n".join(reasoning_parts)
    usage = data.get("usage")
    if isinstance(usage, Mapping):
        sample["usage"] = {
            "prompt_tokens": _int_or_none(usage.get("prompt_tokens")),
            "completion_tokens": _int_or_none(usage.get("completion_tokens")),
        }
    return sample


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: keep the text ones
        return "".join(part.get("text", "") for part in value if isinstance(part, Mapping))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise MalformedResponseError(f"the answer is a {type(value).__name__}, not text")


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _empty_message(choice: Mapping[str, Any]) -> str:
    reason = choice.get("finish_reason")
    if reason == "length":
        return (
            "the model returned an empty answer (finish_reason 'length': the token limit was "
            "reached, perhaps spent on reasoning; raise max_tokens)"
        )
    if reason:
        return f"the model returned an empty answer (finish_reason {reason!r})"
    return "the model returned an empty answer"
