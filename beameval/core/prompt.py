"""A row's prompt, rendered once and read by every target: the stage before the fan-out and its readers.

A multi-target run sends the same prompt to every target, and targets cannot differ in
what it depends on (``prompt_template`` and the row; a target's own ``params:`` only say
how its requests are sent), so the template is rendered once per row, before the graph
fans out, and each target builds its own request body (model name, format, system
prompt, inference parameters) from the carried result. A single-target run takes the
same path, so both send byte-identical bodies and share response-store entries.
"""

from __future__ import annotations

from typing import Any

from beameval.core.errors import TemplateError
from beameval.core.records import InputRow, RenderedPrompt
from beameval.core.templates import Template

__all__ = ["render_prompt", "rendered_prompt"]


def render_prompt(template: Template | None, item: dict[str, Any]) -> RenderedPrompt:
    """Render ``template`` against a row (``{**item, "item": item}``); keep the failure's message instead of raising.

    Without a template the row itself is the prompt (an agent's body template reads it).
    """
    if template is None:
        return RenderedPrompt(item)
    try:
        return RenderedPrompt(template.render({**item, "item": item}))
    except TemplateError as exc:  # the target stages fail the row with it, each for its own target
        return RenderedPrompt(error=str(exc))


def rendered_prompt(row: InputRow) -> Any:
    """The row's rendered prompt, for a target handler's ``prepare``.

    Raises:
        TemplateError: the template failed on this row (with the message it failed with).
    """
    prompt = row.prompt
    assert prompt is not None, "RenderPrompts runs before every target stage"
    if prompt.error is not None:
        raise TemplateError(prompt.error)
    return prompt.value
