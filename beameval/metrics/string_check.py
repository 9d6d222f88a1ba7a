"""string-check: compare two rendered texts with one operator, case-sensitively, 1.0/0.0."""

from __future__ import annotations

import operator
from collections.abc import Callable

from pydantic import field_validator

from beameval.core.templates import Template, render_text
from beameval.metrics.base import Metric, MetricConfig, MetricContext, register

__all__ = ["OPERATIONS", "StringCheck", "StringCheckConfig"]


def _contains(left: str, right: str) -> bool:
    return right in left


def _not_contains(left: str, right: str) -> bool:
    return right not in left


#: operation spelling -> predicate of (left, right); ``contains`` looks for right in left.
OPERATIONS: dict[str, Callable[[str, str], bool]] = {
    "equals": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<>": operator.ne,
    "not equals": operator.ne,
    "contains": _contains,
    "not contains": _not_contains,
    "startswith": str.startswith,
    "endswith": str.endswith,
}


class StringCheckConfig(MetricConfig):
    """Config of ``type: string-check``."""

    operation: str
    left_template: str
    right_template: str

    @field_validator("operation")
    @classmethod
    def _known_operation(cls, operation: str) -> str:
        if operation not in OPERATIONS:
            valid = ", ".join(repr(name) for name in OPERATIONS)
            raise ValueError(f"unknown string-check operation {operation!r}; valid operations are: {valid}")
        return operation


@register("string-check")
class StringCheck(Metric[StringCheckConfig]):
    """Text comparison without normalisation (docs/METRICS.md, `string-check`)."""

    config_class = StringCheckConfig
    value_range = (0.0, 1.0)

    def __init__(self, config: StringCheckConfig) -> None:
        super().__init__(config)
        self._left = Template(config.left_template, "left_template")
        self._right = Template(config.right_template, "right_template")
        self._compare = OPERATIONS[config.operation]

    def output_names(self) -> list[str]:
        return ["string-check"]

    def score(self, ctx: MetricContext) -> dict[str, float]:
        context = ctx.template_context
        left = render_text(self._left, context, "left operand")
        right = render_text(self._right, context, "right operand")
        return {"string-check": float(self._compare(left, right))}
