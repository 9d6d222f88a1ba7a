"""``--output`` placeholders: ``{run_date}`` and ``{run_id}``, resolved once when a run starts.

A scheduled evaluation runs the same command every night; with
``--output gs://B/evals/{run_date}/{run_id}`` each run gets a directory of its own, so no
run ever overwrites another and the history points at immutable outputs. The values are
fixed once, before anything is read or written, so the driver, the workers, the history
record and ``results.json`` all name the same directory.
"""

from __future__ import annotations

import datetime as dt
import string

from beameval.core.errors import ConfigError

__all__ = ["PLACEHOLDERS", "resolve_output"]

PLACEHOLDERS = ("run_date", "run_id")


def resolve_output(template: str, run_id: str, started: float) -> str:
    """``template`` with ``{run_date}`` (UTC ``YYYY-MM-DD`` of ``started``) and ``{run_id}`` filled in.

    ``{{`` and ``}}`` stand for literal braces; a path without braces is returned as is.

    Args:
        template: the ``--output`` value.
        run_id: the run's id (the one ``results.json`` records under ``provenance.run_id``).
        started: the run's start, seconds since the epoch.

    Returns:
        The output location to use for the whole run.

    Raises:
        ConfigError: an unknown placeholder, a format spec, or an unbalanced brace.
    """
    if "{" not in template and "}" not in template:
        return template
    values = {"run_date": dt.datetime.fromtimestamp(started, dt.timezone.utc).strftime("%Y-%m-%d"), "run_id": run_id}
    valid = ", ".join("{" + name + "}" for name in PLACEHOLDERS)
    parts: list[str] = []
    try:
        for literal, field, spec, conversion in string.Formatter().parse(template):
            parts.append(literal)
            if field is None:
                continue
            if field not in values or spec or conversion:
                shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
                raise ConfigError(
                    f"--output {template!r} has the placeholder {shown}; the placeholders are {valid}, "
                    "written exactly so (write {{ and }} for literal braces)."
                )
            parts.append(values[field])
    except ValueError as exc:  # a lone "{" or "}"
        raise ConfigError(
            f"--output {template!r} has an unbalanced brace ({exc}); the placeholders are {valid}, "
            "and {{ and }} stand for literal braces."
        ) from None
    return "".join(parts)
