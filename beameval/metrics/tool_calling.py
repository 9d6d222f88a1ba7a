"""tool-calling: compare the model's OpenAI tool calls with the expected ones, by name and args."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from beameval.core.errors import EvaluatorError, MetricError
from beameval.core.templates import Template
from beameval.metrics.base import Metric, MetricConfig, MetricContext, register

__all__ = ["ToolCalling", "ToolCallingConfig"]

_NAMES = "function_name_accuracy"
_NAMES_AND_ARGS = "function_name_and_args_accuracy"
_EXPECTED_SHAPE = 'a list of OpenAI-style tool calls ({"function": {"name": ..., "arguments": ...}})'
_MALFORMED = object()  # predicted arguments that are not valid JSON


class ToolCallingConfig(MetricConfig):
    """Config of ``type: tool-calling``: ``reference`` renders to the expected tool calls."""

    reference: str | list[Any]


@register("tool-calling")
class ToolCalling(Metric[ToolCallingConfig]):
    """Tool-call accuracy (docs/METRICS.md, `tool-calling`), without mutating the response.

    Calls are keyed by function name, so duplicate names collapse to their last
    occurrence and order is ignored; names are case-sensitive. ``None`` arguments count
    as ``{}``; predicted arguments that are not valid JSON make the args score NaN.
    """

    config_class = ToolCallingConfig
    value_range = (0.0, 1.0)

    def __init__(self, config: ToolCallingConfig) -> None:
        super().__init__(config)
        self._reference = Template(config.reference, "reference")

    def output_names(self) -> list[str]:
        return [_NAMES, _NAMES_AND_ARGS]

    def score(self, ctx: MetricContext) -> dict[str, float]:
        expected = self._expected_calls(ctx)
        calls = self._predicted_calls(ctx)
        predicted = dict(calls)  # duplicate names: the last call wins
        names_match = set(expected) == set(predicted)
        # As in the reference, every predicted call's arguments are decoded, duplicates and
        # calls to unexpected functions included: any malformed one makes the args score NaN.
        if any(arguments is _MALFORMED for _name, arguments in calls):
            return {_NAMES: float(names_match), _NAMES_AND_ARGS: math.nan}
        if not names_match:
            return {_NAMES: 0.0, _NAMES_AND_ARGS: 0.0}
        args_match = all(predicted[name] == arguments for name, arguments in expected.items())
        return {_NAMES: 1.0, _NAMES_AND_ARGS: float(args_match)}

    def _expected_calls(self, ctx: MetricContext) -> dict[str, Any]:
        """Render the reference into expected name -> decoded arguments."""
        rendered = self._reference.render(ctx.template_context)
        if not isinstance(rendered, list):
            raise self._bad_reference(f"a {type(rendered).__name__}")
        calls: dict[str, Any] = {}
        for position, call in enumerate(rendered):
            pair = self._unpack(call)
            if pair is None:
                raise self._bad_reference(f"a list whose item {position} is {str(call)[:80]!r}")
            name, arguments = pair
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError as exc:
                    raise self._error(
                        f"the arguments of reference[{position}] ({name!r}) are not valid JSON "
                        f"({exc.msg}); give them as an object or a JSON string"
                    ) from None
            calls[name] = {} if arguments is None else arguments
        return calls

    def detail_names(self) -> list[str]:
        return ["predicted_calls"]

    def row_details(self, ctx: MetricContext) -> dict[str, str | None]:
        """The predicted calls as JSON (``[{"name", "arguments"}]``), or None when there are none to read."""
        try:
            calls = self._predicted_calls(ctx)
        except EvaluatorError:
            return {"predicted_calls": None}
        return {
            "predicted_calls": json.dumps(
                [{"name": name, "arguments": arguments} for name, arguments in calls], default=str
            )
        }

    def _predicted_calls(self, ctx: MetricContext) -> list[tuple[str, Any]]:
        """Read every predicted (name, decoded arguments) from ``choices[0].message.tool_calls``."""
        response = ctx.sample.get("response")
        if response is None:
            response = ctx.item.get("response")
        if isinstance(response, str):
            try:
                response = json.loads(response)
            except json.JSONDecodeError:
                pass
        if not isinstance(response, Mapping):
            raise self._error(
                "there is no chat-completion response to score: online runs need the model's "
                "response, offline rows need a 'response' field holding one"
            )
        choices = response.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, Mapping) else None
        if not isinstance(message, Mapping):
            raise self._error("the response has no choices[0].message; the target must be a chat-completions endpoint")
        tool_calls = message.get("tool_calls")
        decoded: list[tuple[str, Any]] = []
        for position, call in enumerate(tool_calls or []):
            pair = self._unpack(call)
            if pair is None:
                raise self._error(
                    f"the response's tool_calls[{position}] is not an OpenAI-style tool call "
                    f"(no function name): {str(call)[:80]!r}"
                )
            decoded.append((pair[0], _parse_predicted(pair[1])))
        return decoded

    @staticmethod
    def _unpack(call: Any) -> tuple[str, Any] | None:
        """Return (name, arguments) of an OpenAI-style tool call, or None when it is not one."""
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            return None
        return function["name"], function.get("arguments")

    def _bad_reference(self, got: str) -> MetricError:
        return self._error(
            f"the reference must render to {_EXPECTED_SHAPE}, but it rendered {got}; write it as "
            "one {{ expression }} or use '| tojson' so the list is kept"
        )

    def _error(self, problem: str) -> MetricError:
        return MetricError(f"metric '{self.type_name}': {problem}.")


def _parse_predicted(arguments: Any) -> Any:
    """Decode predicted arguments: a JSON string is parsed, None is ``{}``, else as given."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return _MALFORMED
    return arguments
