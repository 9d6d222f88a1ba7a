"""A row's prompt, rendered once and read by every target: the stage before the fan-out and its readers.

A multi-target run sends the same prompt to every target, and targets cannot differ in
what it depends on (``prompt_template`` and the row; a target's own ``params:`` only say
how its requests are sent), so the template is rendered once per row, before the graph
fans out, and each target builds its own request body (model name, format, system
prompt, inference parameters) from the carried result. A single-target run builds its
requests the same way, so both send byte-identical bodies and share response-store entries.
"""

from __future__ import annotations

from typing import Any

from beameval.core.errors import TemplateError
from beameval.core.records import InputRow, replaced
from beameval.core.templates import Template

__all__ = ["render_prompt", "rendered_prompt"]


def render_prompt(template: Template | None, row: InputRow) -> InputRow:
    """The row with its prompt rendered (``{**item, "item": item}``), or with the template's failure message.

    Without a template the row itself is the prompt (an agent's body template reads it).
    The value and the message are plain fields of the row: a wrapper object would double
    what the rendered prompt costs to carry through a shuffle.
    """
    assert row.item is not None
    if template is None:
        return replaced(row, prompt=row.item)
    try:
        return replaced(row, prompt=template.render({**row.item, "item": row.item}))
    except TemplateError as exc:  # the target stages fail the row with it, each for its own target
        return replaced(row, prompt_error=str(exc))


def rendered_prompt(row: InputRow) -> Any:
    """The row's rendered prompt, for a target handler's ``prepare``.

    Raises:
        TemplateError: the template failed on this row (with the message it failed with).
    """
    if row.prompt_error is not None:
        raise TemplateError(row.prompt_error)
    return row.prompt
