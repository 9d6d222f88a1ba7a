"""What changed between the config a job was started with and the one a ``--resume`` brings.

A ``--resume`` answers from the journal what was already paid for and sends the rest; if
the prompt, the dataset, the target or a metric changed meanwhile, the journal's answers
are for other requests: the run would silently pay for every row again (a changed
request has another key) or mix two evaluations in one OUT_DIR. So a resume must bring
the same config, except for what changes neither what is sent nor how it is scored.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["RESUMABLE_CHANGES", "changed_paths", "resumable_view"]

#: Config entries a ``--resume`` may change: the spending cap, how the aggregates are summarised,
#: where the shared store is, and how an early decision is taken.
RESUMABLE_CHANGES = (("params", "budget"), ("statistics",), ("cache",), ("decide",))


def resumable_view(dump: dict[str, Any]) -> dict[str, Any]:
    """``dump`` (``EvalConfig.public_dump``) without the entries a resume may change."""
    view = json.loads(json.dumps(dump))  # a deep copy of JSON-ready data
    for path in RESUMABLE_CHANGES:
        parent = view
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return view


def changed_paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    """The dotted paths (``metrics[1].reference``, ``prompt_template``) whose values differ, in order."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in [*before, *(k for k in after if k not in before)]:
            found += changed_paths(before.get(key), after.get(key), f"{prefix}.{key}" if prefix else str(key))
        return found
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            path
            for i, (a, b) in enumerate(zip(before, after, strict=True))
            for path in changed_paths(a, b, f"{prefix}[{i}]")
        ]
    return [] if before == after else [prefix or "(the whole config)"]
