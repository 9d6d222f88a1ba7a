"""Named points where a test can kill the process, to prove that a crash there loses nothing.

``BEAMEVAL_CRASH_AT=publish-swapped`` makes the process that reaches ``crash_point("publish-swapped")``
kill itself with SIGKILL on the spot: no ``finally``, no ``atexit``, exactly what a kill -9
or a power cut leaves. Unset (always, outside tests), a crash point costs one dictionary
look-up. The points are listed where they are used: ``pipeline.output_dir.publish_outputs``
and ``beameval.cache.store.publish``.
"""

from __future__ import annotations

import os
import signal

__all__ = ["CRASH_ENV", "crash_point"]

CRASH_ENV = "BEAMEVAL_CRASH_AT"


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL when ``BEAMEVAL_CRASH_AT`` names this point."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
