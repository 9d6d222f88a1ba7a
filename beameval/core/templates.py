"""Sandboxed Jinja templates, compiled once and rendered per row.

Rendering rules follow the reference SDK (docs/METRICS.md, "Templates and what they see"): a string
that is exactly one ``{{ expression }}`` yields the expression's native value; any other
string renders to text; a template mentioning ``tojson`` has its output JSON-decoded;
dicts and lists render element-wise. Unlike the reference, templates are compiled once
per worker (the reference recompiles per row, ~25-30% of its CPU) and constant strings
skip Jinja entirely. Templates run in an immutable sandbox with a budget per render
(:mod:`beameval.core.sandbox`): they cannot change the row, and a render that loops or
grows without bound fails its row instead of hanging the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import TemplateSyntaxError, Undefined, UndefinedError
from jinja2.exceptions import SecurityError

from beameval.core.errors import TemplateBudgetError, TemplateError
from beameval.core.sandbox import (
    ENV,
    MAX_RENDER_CHARS,
    REMOVED_GLOBALS,
    RenderBudget,
    RenderBudgetExceeded,
    check_output,
)

__all__ = ["Template", "metric_context", "render_text"]

_ENV = ENV
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MISSING = object()
#: One ``{{ … }}`` of a template: ``re.split`` on it alternates the text and the expressions.
_EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_MISSING_ATTR = re.compile(r"has no attribute '([^']+)'|'([^']+)' is undefined")


def metric_context(item: Mapping[str, Any], sample: Mapping[str, Any]) -> dict[str, Any]:
    """The context metric templates see: row and sample keys at top level, plus both whole.

    Sample keys win over row keys, as in the reference.
    """
    return {**item, **sample, "item": item, "sample": sample}


class Template:
    """A compiled template: a string, or a dict/list tree of strings and constants.

    Args:
        source: the template as written in the config.
        name: what the template is called in messages (``prompt_template``, ``reference``).

    Raises:
        TemplateError: the template has a Jinja syntax error.
    """

    __slots__ = ("_plain", "_render", "name", "source")

    def __init__(self, source: Any, name: str) -> None:
        self.source = source
        self.name = name
        self._render = _compile(source, name)
        # Constants, ``{{ a.b.c }}`` lookups and text joining them cannot loop or grow: no budget needed.
        self._plain = _budget_free(source)

    def render(self, context: Mapping[str, Any]) -> Any:
        """Render against ``context``.

        Raises:
            TemplateError: a referenced variable is missing, or sandboxed code was blocked.
        """
        try:
            if self._plain:
                return self._render(context)
            with RenderBudget():
                return self._render(context)
        except RenderBudgetExceeded as exc:
            raise TemplateBudgetError(f"template '{self.name}' exceeded its rendering budget: {exc}.") from None
        except RecursionError:
            raise TemplateBudgetError(
                f"template '{self.name}' recursed too deeply (a macro calling itself without end?)."
            ) from None
        except UndefinedError as exc:
            raise TemplateError(_missing_message(self.name, exc, context)) from None
        except SecurityError as exc:
            raise TemplateError(f"template '{self.name}' was blocked by the sandbox: {exc}") from None
        except TemplateError:
            raise
        except Exception as exc:  # a filter or test raising on bad data (e.g. tojson on bytes)
            raise TemplateError(f"template '{self.name}' failed to render: {type(exc).__name__}: {exc}") from None

    @property
    def is_constant(self) -> bool:
        """True when rendering never looks at the context."""
        return not _has_jinja(self.source)


def render_text(template: Template, context: Mapping[str, Any], what: str) -> str:
    """Render a template whose result must be text.

    Numbers are turned into their text form, so ``"{{ item.answer }}"`` works for integer
    answers (the reference SDK rejects them).

    Raises:
        TemplateError: rendering failed or produced a list, dict or other non-text value.
    """
    value = template.render(context)
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise TemplateError(
        f"the {what} must be text, but template '{template.name}' rendered a "
        f"{type(value).__name__}; use '| tojson' or '| string' in the template to turn it into text."
    )


def _has_jinja(source: Any) -> bool:
    if isinstance(source, str):
        return "{{" in source or "{%" in source or "{#" in source
    if isinstance(source, Mapping):
        return any(_has_jinja(v) for v in source.values())
    if isinstance(source, list):
        return any(_has_jinja(v) for v in source)
    return False


def _compile(source: Any, name: str) -> Any:
    """Return a function of the context that renders ``source``."""
    if isinstance(source, (Mapping, list)):
        return _compile_tree(source, name)
    if not isinstance(source, str) or not _has_jinja(source):
        return lambda ctx: source
    decode_json = "tojson" in source
    try:
        expression = _single_expression(source)
        if expression is not None:
            compiled = _ENV.compile_expression(expression, undefined_to_none=False)

            def render_expression(ctx: Mapping[str, Any]) -> Any:
                value = compiled(**ctx)
                if isinstance(value, str):
                    check_output(len(value))
                if isinstance(value, Undefined):
                    str(value)  # StrictUndefined raises UndefinedError with the missing name
                if decode_json and isinstance(value, str):
                    return _json_or_text(value)
                return value

            path = _dotted_path(expression)
            return render_expression if path is None else _lookup(path, render_expression)
        compiled_template = _ENV.from_string(source)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"template '{name}' has a syntax error at line {exc.lineno}: {exc.message}") from None

    def render_string(ctx: Mapping[str, Any]) -> Any:
        # Streamed and counted, so a loop printing without end stops at the budget, not at the memory limit.
        chunks = []
        size = 0
        for chunk in compiled_template.generate(ctx):
            size += len(chunk)
            check_output(size)
            chunks.append(chunk)
        text = "".join(chunks)
        if decode_json:
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise TemplateError(
                    f"template '{name}' uses tojson, so its output must be JSON, but it rendered "
                    f"{text[:80]!r} ({exc.msg}); use tojson in a single {{{{ expression }}}} to get text."
                ) from None
        return text

    pieces = None if decode_json else _text_of_lookups(source)
    return render_string if pieces is None else _joined(pieces, render_string)


#: Levels of a dict/list template written out in one generated function; deeper levels get functions of their own.
_GENERATED_DEPTH = 32


def _compile_tree(source: Mapping[Any, Any] | list[Any], name: str) -> Callable[[Mapping[str, Any]], Any]:
    """A dict/list template -> one function that builds it, with new containers on every call.

    The tree is written out as one Python display, ``{_0: [{_1: _2, _3: _4(ctx)}]}``, over
    names bound to its keys, its constants and its strings' render functions, and compiled
    once: a chat prompt renders in about half the time of a closure per container, and a
    prompt renders once a row. The generated code holds only those names, never any text
    of the template. Every ``_GENERATED_DEPTH`` levels a subtree gets a function of its
    own (the compiler refuses very deep displays).
    """
    bound: dict[str, Any] = {}

    def bind(value: Any) -> str:
        ref = f"_{len(bound)}"
        bound[ref] = value
        return ref

    def display(node: Any, level: int) -> str:
        if isinstance(node, (Mapping, list)) and level >= _GENERATED_DEPTH:
            return f"{bind(_compile_tree(node, name))}(ctx)"
        if isinstance(node, Mapping):
            return "{" + ", ".join(f"{bind(key)}: {display(value, level + 1)}" for key, value in node.items()) + "}"
        if isinstance(node, list):
            return "[" + ", ".join(display(value, level + 1) for value in node) + "]"
        if not isinstance(node, str) or not _has_jinja(node):
            return bind(node)  # a constant, the same object every time (texts and numbers: immutable)
        return f"{bind(_compile(node, name))}(ctx)"

    code = f"lambda ctx: {display(source, 0)}"
    return eval(code, {"__builtins__": {}, **bound})  # noqa: S307 - names only


def _single_expression(source: str) -> str | None:
    """The inner expression when ``source`` is exactly one ``{{ … }}``, else None."""
    text = source.strip()
    if (
        text.startswith("{{")
        and text.endswith("}}")
        and text.count("{{") == 1
        and text.count("}}") == 1
        and "{%" not in text
        and "{#" not in text
    ):
        return text[2:-2].strip()
    return None


def _budget_free(source: Any) -> bool:
    """Whether every string of ``source`` is a constant, one plain lookup, or text and plain lookups.

    Such a template (most prompts: ``"{{ item.id }}: {{ item.question }}"`` in a message)
    renders with no loop, call or filter, whichever way it renders, so it needs no budget.
    """
    if isinstance(source, Mapping):
        return all(_budget_free(value) for value in source.values())
    if isinstance(source, list):
        return all(_budget_free(value) for value in source)
    if not isinstance(source, str) or not _has_jinja(source):
        return True
    return _is_lookup(source) or ("tojson" not in source and _text_of_lookups(source) is not None)


def _is_lookup(source: str) -> bool:
    """Whether ``source`` is exactly one plain ``{{ a.b.c }}`` expression."""
    expression = _single_expression(source)
    return expression is not None and _dotted_path(expression) is not None


def _dotted_path(expression: str) -> list[str] | None:
    """The names of a plain ``a.b.c`` expression whose lookups can skip Jinja, else None."""
    if not _DOTTED.match(expression):
        return None
    names = expression.split(".")
    # Jinja resolves ``d.keys`` to the dict method and ``_x`` through the sandbox: leave those to it.
    if any(name.startswith("_") or hasattr(dict, name) for name in names[1:]):
        return None
    return names


def _lookup(path: list[str], fallback: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]], Any]:
    """Resolve ``a.b.c`` through plain dicts directly (most templates are this), else via Jinja.

    Same result as Jinja for dict values; anything else (a missing key, an object, a
    list) goes to ``fallback``, which raises the usual errors. Saves most of the per-row
    template cost on offline runs.
    """
    first, rest = path[0], path[1:]

    def render(ctx: Mapping[str, Any]) -> Any:
        value = ctx.get(first, _MISSING)
        for name in rest:
            if type(value) is not dict or name not in value:
                return fallback(ctx)
            value = value[name]
        return fallback(ctx) if value is _MISSING else value

    return render


def _text_of_lookups(source: str) -> list[str | list[str]] | None:
    """``source`` as text and plain ``{{ a.b.c }}`` lookups in turn (``"{{ item.id }}: {{ item.q }}"``), else None.

    Only sources whose Jinja output is plainly that text and those values qualify: no
    blocks, comments, whitespace control or carriage returns (Jinja rewrites those), and
    no stray ``}}`` in the text.
    """
    if "{%" in source or "{#" in source or "\r" in source:
        return None
    parts: list[str | list[str]] = []
    for index, piece in enumerate(_EXPRESSION.split(source)):
        if index % 2 == 0:
            if "{{" in piece or "}}" in piece:
                return None
            if piece:
                parts.append(piece)
            continue
        path = _dotted_path(piece.strip())
        if path is None:
            return None
        parts.append(path)
    return parts


def _joined(
    parts: list[str | list[str]], fallback: Callable[[Mapping[str, Any]], Any]
) -> Callable[[Mapping[str, Any]], Any]:
    """Render text and lookups by joining strings (about a tenth of Jinja's cost), the same text as Jinja's.

    A lookup through plain dicts to a ``str``, ``int`` or ``float`` is written as Jinja
    writes it (``str(value)``); anything else (a missing key, None, a list, an output over
    the limit) renders through ``fallback``, the compiled template, which gives its usual
    result or error.
    """

    def render(ctx: Mapping[str, Any]) -> Any:
        chunks = []
        for part in parts:
            if type(part) is str:
                chunks.append(part)
                continue
            value = ctx.get(part[0], _MISSING)
            for name in part[1:]:
                if type(value) is not dict or name not in value:
                    return fallback(ctx)
                value = value[name]
            kind = type(value)
            if kind is str:
                chunks.append(value)
            elif kind is int or kind is float:
                chunks.append(str(value))
            else:
                return fallback(ctx)
        text = "".join(chunks)
        return fallback(ctx) if len(text) > MAX_RENDER_CHARS else text

    return render


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _missing_message(name: str, exc: UndefinedError, context: Mapping[str, Any]) -> str:
    match = _MISSING_ATTR.search(str(exc))
    missing = next((g for g in match.groups() if g), None) if match else None
    if missing in REMOVED_GLOBALS:
        return f"template '{name}' uses {missing}(), which is not available in templates (it only makes filler text)."
    item = context.get("item")
    sample = context.get("sample")
    item_keys = sorted(item) if isinstance(item, Mapping) else []
    parts = [
        f"template '{name}' references a field the row does not have" + (f": '{missing}'" if missing else f" ({exc})"),
        f"item keys: {item_keys}",
    ]
    if isinstance(sample, Mapping):
        parts.append(f"sample keys: {sorted(sample)}")
    parts.append("make sure the dataset provides every field the template uses")
    return "; ".join(parts) + "."
