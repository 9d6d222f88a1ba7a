r"""number-check: compare the last number found in each of two rendered operands.

Parsing follows the reference SDK exactly (docs/METRICS.md, `number-check`), quirks included:

* each operand is rendered and then ``str()``-ed, so a rendered ``5`` is ``"5"``;
* the number is the **last** match of ``[+-]?[.\d]*\d+``: with one dot it is a float,
  with none an int, with more than one it is NaN (``"1.2.3"``);
* ``\d`` is Unicode-aware, so other scripts' digits count (``"٣"`` parses as ``3``);
* commas split numbers, so ``"1,234"`` parses as ``234``; there is no exponent
  support, so ``"1e5"`` parses as ``5`` and ``str(1e20) == "1e+20"`` as ``20``;
* an operand with no number, or a multi-dot one, makes the score NaN (not an error),
  whatever the operation (checked against the reference by ``bench/parity.py``).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable

from pydantic import field_validator, model_validator

from beameval.core.templates import Template
from beameval.metrics.base import Metric, MetricConfig, MetricContext, register

__all__ = [
    "ABSOLUTE_DIFFERENCE",
    "COMPARATORS",
    "OPERATIONS",
    "NumberCheck",
    "NumberCheckConfig",
    "parse_number",
]

ABSOLUTE_DIFFERENCE = "absolute difference"

_Number = int | float

#: operation spelling -> predicate of (left, right); ``absolute difference`` is separate.
COMPARATORS: dict[str, Callable[[_Number, _Number], bool]] = {
    "equals": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<>": operator.ne,
    "not equals": operator.ne,
    ">=": operator.ge,
    "gte": operator.ge,
    "greater than or equal": operator.ge,
    ">": operator.gt,
    "gt": operator.gt,
    "greater than": operator.gt,
    "<=": operator.le,
    "lte": operator.le,
    "less than or equal": operator.le,
    "<": operator.lt,
    "lt": operator.lt,
    "less than": operator.lt,
}
OPERATIONS = (*COMPARATORS, ABSOLUTE_DIFFERENCE)

_NUMBER = re.compile(r"[+-]?[.\d]*\d+")


def parse_number(text: str) -> int | float | None:
    """Parse the last number in ``text`` the reference's way (see the module docstring).

    Args:
        text: the rendered operand.

    Returns:
        An int (no dot), a float (one dot), NaN (several dots), or None (no number).

    """
    matches = _NUMBER.findall(text)
    if not matches:
        return None
    last: str = matches[-1]
    dots = last.count(".")
    if dots == 0:
        return int(last)
    if dots == 1:
        return float(last)
    return math.nan


class NumberCheckConfig(MetricConfig):
    """Config of ``type: number-check``; ``epsilon`` only for ``absolute difference``."""

    operation: str
    left_template: str
    right_template: str
    epsilon: float | None = None

    @field_validator("operation")
    @classmethod
    def _known_operation(cls, operation: str) -> str:
        if operation not in OPERATIONS:
            valid = ", ".join(repr(name) for name in OPERATIONS)
            raise ValueError(f"unknown number-check operation {operation!r}; valid operations are: {valid}")
        return operation

    @model_validator(mode="after")
    def _epsilon_rules(self) -> NumberCheckConfig:
        if self.operation == ABSOLUTE_DIFFERENCE:
            if self.epsilon is None:
                raise ValueError(
                    "number-check operation 'absolute difference' requires 'epsilon', the "
                    "largest accepted |left - right| (e.g. epsilon: 0.01)"
                )
            if not self.epsilon >= 0:  # also rejects NaN
                raise ValueError(f"number-check 'epsilon' must be >= 0, got {self.epsilon}")
        elif self.epsilon:
            raise ValueError(
                f"number-check 'epsilon' is only used by 'absolute difference'; remove it or set "
                f"it to 0 for operation {self.operation!r}"
            )
        return self


@register("number-check")
class NumberCheck(Metric[NumberCheckConfig]):
    """Numeric comparison of two operands (docs/METRICS.md, `number-check`)."""

    config_class = NumberCheckConfig
    value_range = (0.0, 1.0)

    def __init__(self, config: NumberCheckConfig) -> None:
        super().__init__(config)
        self._left = Template(config.left_template, "left_template")
        self._right = Template(config.right_template, "right_template")
        self._compare = self._comparator(config)

    @staticmethod
    def _comparator(config: NumberCheckConfig) -> Callable[[_Number, _Number], bool]:
        if config.operation != ABSOLUTE_DIFFERENCE:
            return COMPARATORS[config.operation]
        epsilon = config.epsilon or 0.0
        return lambda left, right: abs(left - right) <= epsilon

    def output_names(self) -> list[str]:
        return ["number-check"]

    def score(self, ctx: MetricContext) -> dict[str, float]:
        context = ctx.template_context
        left = parse_number(str(self._left.render(context)))
        right = parse_number(str(self._right.render(context)))
        if left is None or right is None or math.isnan(left) or math.isnan(right):
            return {"number-check": math.nan}
        return {"number-check": float(self._compare(left, right))}
