"""Ctrl-C and SIGTERM stop a run cleanly: one line, exit 130, no traceback, no worker noise.

Both signals become ``KeyboardInterrupt`` in the driver's main thread, which first stops
the local worker processes (multi-process mode) with SIGTERM, so none sends another paid
request. Those workers ignore SIGINT (``pipeline.local_runner``): a terminal's Ctrl-C, sent
to the whole process group, reaches the driver alone instead of every worker printing its
own traceback. Beam often re-raises the interruption wrapped (``RuntimeError:
KeyboardInterrupt``, gRPC errors), so whatever the run raises after a signal arrived is
reported as the interruption it is, not as a bug.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

__all__ = ["EXIT_INTERRUPTED", "InterruptState", "interruptible", "stop_worker_processes"]

EXIT_INTERRUPTED = 130


@dataclass
class InterruptState:
    """Which signal stopped the run (None while none has)."""

    signal_name: str | None = None
    quiet: bool = True
    #: The run's output location once resolved: the message on interrupt names its ``_responses/``.
    output: str | None = None

    def arrived(self, signum: int) -> bool:
        """Record a signal; True for the first one (later ones must not interrupt the clean-up)."""
        first = self.signal_name is None
        if first:
            self.signal_name = signal.Signals(signum).name
            if self.quiet:  # stopped workers and their driver threads have dying words; they are not news
                logging.disable(logging.CRITICAL)
                threading.excepthook = _silent
        return first


def stop_worker_processes() -> int:
    """SIGTERM this process's local Beam worker processes, so none sends another request; returns how many.

    They ignore SIGINT (``pipeline.local_runner``) and would otherwise finish their bundles
    (and send every queued request) before noticing the driver is gone. Found through
    ``/proc``; where there is none, the workers stop when their control channel closes.
    """
    stopped = 0
    me = os.getpid()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == me and b"sdk_worker_main" in command:
            try:
                os.kill(int(entry.name), signal.SIGTERM)
                stopped += 1
            except ProcessLookupError:
                pass
    return stopped


def _silent(args: threading.ExceptHookArgs) -> None:
    """Where a Beam thread's exception goes once the run is being stopped."""


@contextmanager
def interruptible(quiet: bool = True) -> Iterator[InterruptState]:
    """Run the body with SIGINT and SIGTERM turned into ``KeyboardInterrupt`` in the main thread.

    Args:
        quiet: silence logging and Beam's thread tracebacks once a signal arrives (``--debug`` keeps them).
    """
    state = InterruptState(quiet=quiet)
    if threading.current_thread() is not threading.main_thread():  # signals belong to the main thread
        yield state
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if state.arrived(signum):
            stop_worker_processes()
            raise KeyboardInterrupt

    previous_hook = threading.excepthook
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield state
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if state.signal_name is not None and quiet:
            logging.disable(logging.NOTSET)
            threading.excepthook = previous_hook
