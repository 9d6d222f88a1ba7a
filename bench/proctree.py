"""Process-tree walking from /proc, shared by the benchmarks that measure a subprocess and its workers."""

from __future__ import annotations

import os

__all__ = ["children", "descendants"]


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's), from /proc/<pid>/task/*/children."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                found += [int(child) for child in handle.read().split()]
    except OSError:
        pass
    return found


def descendants(root: int) -> list[int]:
    """``root`` and every process below it."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children(pid)
    return found
