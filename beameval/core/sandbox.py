"""The Jinja environment templates run in: immutable, sandboxed, and with a budget per render.

Config templates are code from a file anyone may have written, run once per row. Jinja's
``ImmutableSandboxedEnvironment`` already refuses attribute tricks and mutation of the
row (``item.update(...)``, ``item.pop(...)``); this module adds what it lacks, a bound on
the work and memory one render may take:

- ``MAX_RENDER_STEPS`` (1,000,000): every ``range()`` step, attribute or item lookup,
  call, filter and intercepted operator costs one step. Two nested ``range(100000)``
  loops, or a macro that calls itself twice per level, run out in well under a second.
- ``MAX_RENDER_CHARS`` (64 Mi characters, the dataset cell limit): the most text one
  render may produce. Output is counted as it streams, and the operations that can
  build a large value in one step are checked *before* they run: ``*`` and ``+`` on text
  or lists, ``**`` on integers, ``%`` formatting, filters and methods given a size
  argument (``'x'|center(10**9)``, ``'x'.ljust(10**9)``), ``tojson(indent=N)`` (N per
  nesting level on every line), and ``namespace`` attributes.
- A macro call costs ten steps (it does about ten lookups' work).
- No ``lipsum`` global (it exists to generate filler text: ``lipsum(n=10**8)``).

Loops over the row's own lists cost nothing per iteration, so their work is bounded by
the row's size (which ``MAX_CELL_CHARS`` and ``MAX_NESTING`` bound).

A render over budget raises ``RenderBudgetExceeded``; ``Template.render`` turns it into a
``TemplateError`` naming the template, so the row fails with that message.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from jinja2 import StrictUndefined
from jinja2.runtime import Context, Macro, Namespace
from jinja2.sandbox import ImmutableSandboxedEnvironment

from beameval.core.sanitize import MAX_CELL_CHARS

__all__ = [
    "ENV",
    "REMOVED_GLOBALS",
    "MAX_RENDER_CHARS",
    "MAX_RENDER_STEPS",
    "RenderBudget",
    "RenderBudgetExceeded",
    "check_output",
]

MAX_RENDER_STEPS = 1_000_000
REMOVED_GLOBALS = ("lipsum",)
MAX_RENDER_CHARS = MAX_CELL_CHARS
#: Filters and str methods whose integer arguments are output sizes (widths, counts), checked before they run.
_SIZED_FILTERS = frozenset({"center", "indent", "truncate", "wordwrap", "batch", "slice"})
_SIZED_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "__mul__", "__rmul__"})
#: A macro call costs as much as about ten lookups (it builds a frame and a context), so it is charged so.
_MACRO_STEPS = 10
_NESTED_FIELD = re.compile(r"\{[^{}]*\{")
#: A run of this many digits in a format string is a field width no prompt needs ("%1000000000d").
_HUGE_WIDTH = re.compile(r"\d{9,}")


class RenderBudgetExceeded(Exception):
    """A render went over ``MAX_RENDER_STEPS`` or ``MAX_RENDER_CHARS``; the message says which and how."""


class _Budget:
    __slots__ = ("steps",)

    def __init__(self) -> None:
        self.steps = 0


_CURRENT: ContextVar[_Budget | None] = ContextVar("beameval_render_budget", default=None)


class RenderBudget:
    """``with RenderBudget():`` gives the renders inside one fresh budget (nested blocks share the outer one)."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _CURRENT.set(_Budget()) if _CURRENT.get() is None else None

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)


def _spend(steps: int = 1) -> None:
    current = _CURRENT.get()
    if current is None:
        return
    current.steps += steps
    if current.steps > MAX_RENDER_STEPS:
        raise RenderBudgetExceeded(
            f"it took more than {MAX_RENDER_STEPS:,} steps (loop iterations, lookups and calls), the limit "
            "per render; simplify the template (nested loops over range() are the usual cause)"
        )


def _too_big(size: int, what: str) -> RenderBudgetExceeded:
    return RenderBudgetExceeded(
        f"{what} would be {size:,} characters or items, over the limit of {MAX_RENDER_CHARS:,} per render"
    )


def check_output(size: int) -> None:
    """Refuse rendered output longer than ``MAX_RENDER_CHARS``.

    Raises:
        RenderBudgetExceeded: ``size`` is over the limit.
    """
    if size > MAX_RENDER_CHARS:
        raise _too_big(size, "the output")


def _check_args(args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> None:
    """Size arguments (widths, counts, lengths) larger than the output budget are refused up front."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_RENDER_CHARS:
            raise _too_big(abs(value), f"{what} with argument {value}")


def _check_format(text: Any, values: tuple[Any, ...], what: str) -> None:
    """A format string with a huge field width ("%1000000000d", "{:>1000000000}", "%*d") is refused before it runs."""
    if not isinstance(text, str):
        return
    match = _HUGE_WIDTH.search(text)
    if match is not None:
        raise RenderBudgetExceeded(
            f"{what} asks for a field width of {int(match.group()):,} characters, over the limit of "
            f"{MAX_RENDER_CHARS:,} per render"
        )
    if "*" in text:  # the width comes from the values
        _check_args(values, {}, what)


def _checking_args(function: Callable[..., Any], what: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        _check_args(args, kwargs, what)
        for value in (*args, *kwargs.values()):
            if isinstance(value, dict):
                _check_args((), value, what)
        return function(*args, **kwargs)

    return run


def _check_result(value: Any, what: str) -> None:
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_RENDER_CHARS:
        raise _too_big(len(value), what)


def _check_binop(operator: str, left: Any, right: Any) -> None:
    sized = (str, list, tuple)
    if operator == "*":
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, sized) and isinstance(count, int) and len(seq) * max(count, 0) > MAX_RENDER_CHARS:
                raise _too_big(len(seq) * count, "a repetition with '*'")
    elif operator == "+":
        if isinstance(left, sized) and isinstance(right, sized) and len(left) + len(right) > MAX_RENDER_CHARS:
            raise _too_big(len(left) + len(right), "a concatenation with '+'")
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
            bits = max(abs(left).bit_length() - 1, 1) * right
            if bits > 8 * MAX_RENDER_CHARS:
                raise RenderBudgetExceeded(f"{left} ** {right} is a number of about {bits:,} bits, too large")
    elif operator == "%" and isinstance(left, str):
        _check_format(left, right if isinstance(right, tuple) else (right,), "'%' formatting")


def _check_indent(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """``tojson(indent=N)`` writes N characters per nesting level on every line: refuse a total over the budget.

    The cost is counted on the value before ``json.dumps`` allocates it: ``indent`` times
    the sum of every element's depth (one line each), so ``tojson(indent=10**9)`` fails
    at once instead of after gigabytes.
    """
    indent = args[0] if args else kwargs.get("indent")
    width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    if width <= 0:
        return
    if width > MAX_RENDER_CHARS:
        raise _too_big(width, f"filter 'tojson' with indent {width:,}")
    total, stack = 0, [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, (list, tuple)):
            children = current
        else:
            continue
        for child in children:
            total += depth * width
            if total > MAX_RENDER_CHARS:
                raise _too_big(total, f"filter 'tojson' with indent {width:,}")
            stack.append((child, depth + 1))


class _Range:
    """``range()`` for templates: same values, each step paid for from the budget."""

    __slots__ = ("_range",)

    def __init__(self, *args: int) -> None:
        self._range = range(*args)

    def __iter__(self) -> Iterator[int]:
        for value in self._range:
            _spend()
            yield value

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, index: Any) -> Any:
        return self._range[index]

    def __contains__(self, value: object) -> bool:
        return value in self._range

    def __repr__(self) -> str:
        return repr(self._range)


class _Namespace(Namespace):
    """``namespace()`` whose attributes cannot grow past the output budget (``ns.s = ns.s ~ ns.s`` doubling)."""

    def __setitem__(self, name: str, value: Any) -> None:
        _spend()
        _check_result(value, f"namespace attribute {name!r}")
        super().__setitem__(name, value)


def _budgeted_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    # Filters marked pass_context/pass_environment get that object first, then the value.
    skip = 2 if getattr(function, "jinja_pass_arg", None) is not None else 1

    @functools.wraps(function)  # keeps Jinja's pass_context/pass_environment marker
    def run(*args: Any, **kwargs: Any) -> Any:
        _spend()
        if name in _SIZED_FILTERS:
            _check_args(args[skip:], kwargs, f"filter '{name}'")
        elif name == "format" and args:
            _check_format(args[0], args[1:], "filter 'format'")
        elif name == "tojson" and len(args) >= skip:
            _check_indent(args[skip - 1], args[skip:], kwargs)
        result = function(*args, **kwargs)
        _check_result(result, f"the result of filter '{name}'")
        return result

    return run


class _BudgetedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, charging every lookup, call and intercepted operator to the render's budget."""

    intercepted_binops = frozenset({"*", "+", "**", "%"})

    def __init__(self) -> None:
        super().__init__(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
        for name in REMOVED_GLOBALS:
            self.globals.pop(name, None)
        self.globals["range"] = _Range
        self.globals["namespace"] = _Namespace
        self.filters = {name: _budgeted_filter(name, f) for name, f in self.filters.items()}

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _spend(_MACRO_STEPS if isinstance(__obj, Macro) else 1)
        name = getattr(__obj, "__name__", "a function")
        if name in _SIZED_METHODS:
            _check_args(args, kwargs, f"calling {name}")
        result = super().call(__context, __obj, *args, **kwargs)
        _check_result(result, f"the result of {name}")
        return result

    def getattr(self, obj: Any, attribute: str) -> Any:
        _spend()
        value = super().getattr(obj, attribute)
        if attribute in ("format", "format_map") and isinstance(obj, str):
            _check_format(obj, (), f"str.{attribute}")
            if _NESTED_FIELD.search(obj):  # "{:>{}}": the width is an argument
                return _checking_args(value, f"str.{attribute}")
        return value

    def getitem(self, obj: Any, argument: Any) -> Any:
        _spend()
        return super().getitem(obj, argument)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        _spend()
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)


ENV = _BudgetedEnvironment()
