"""Process-tree walking from /proc and periodic sampling, shared by the benchmarks that measure a subprocess."""

from __future__ import annotations

import os
import threading
from typing import TypeVar

__all__ = ["PeriodicSampler", "children", "descendants"]

_Sampler = TypeVar("_Sampler", bound="PeriodicSampler")


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


class PeriodicSampler:
    """Calls ``sample()`` on entry and then every ``interval`` seconds on a daemon thread, until the ``with`` ends."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self: _Sampler) -> _Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        """Take one sample (subclasses)."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
