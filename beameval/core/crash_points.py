"""Named points where a test can kill the process, to prove that a crash there loses nothing.

``BEAMEVAL_CRASH_AT=publish-swapped`` makes the process that reaches ``crash_point("publish-swapped")``
kill itself with SIGKILL on the spot: no ``finally``, no ``atexit``, exactly what a kill -9
or a power cut leaves. Unset (always, outside tests), a crash point costs one dictionary
look-up. The points are listed where they are used: ``pipeline.output_dir.publish_outputs``
and ``beameval.cache.store.publish``.

``fail_once`` is the other kind: the named point raises ``InjectedFailure`` the first time
the process reaches it with a given token (a bundle's first row), as a stage that fails
once and succeeds when Beam retries its bundle (``transforms.generate``,
``transforms.metric_calls``: ``generate-bundle-answered``, ``metric-calls-answered``).
"""

from __future__ import annotations

import os
import signal

__all__ = ["CRASH_ENV", "InjectedFailure", "crash_point", "fail_once"]

CRASH_ENV = "BEAMEVAL_CRASH_AT"

_FAILED: set[tuple[str, str]] = set()


class InjectedFailure(RuntimeError):
    """Raised by ``fail_once``: a failure a test asked for."""


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL when ``BEAMEVAL_CRASH_AT`` names this point."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def fail_once(name: str, token: str) -> None:
    """Raise ``InjectedFailure`` when ``BEAMEVAL_CRASH_AT`` names this point, once per ``token`` in this process."""
    if os.environ.get(CRASH_ENV) == name and (name, token) not in _FAILED:
        _FAILED.add((name, token))
        raise InjectedFailure(f"{name}: injected failure for {token} (its retry succeeds)")
