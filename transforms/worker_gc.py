"""Keep the cyclic GC's full collections out of a worker's busy window: freeze its start-up heap, once per process.

By the time a DoFn that calls an endpoint is set up, its worker process holds millions of
long-lived objects (Beam, pydantic, pyarrow, the modules themselves). A full (generation 2)
collection walks every one of them with the GIL held: 150-270 ms during which no reply is
read and no request is sent. Measured at 100 ms latency with 64 in flight, the test
server's in-flight count fell from 60 to 11 for a quarter of a second, once or twice per
run, about 2% of a 14 s run's throughput. ``gc.freeze`` moves those objects to a permanent
generation that the collector no longer scans; collecting first keeps today's garbage out
of it. Reference counting still frees frozen objects; only a reference cycle among objects
that were alive at setup is never reclaimed.
"""

from __future__ import annotations

import gc
import os
import threading

__all__ = ["freeze_startup_heap"]

_frozen_in: set[int] = set()  # process ids (a forked child has its own heap to freeze)
_lock = threading.Lock()  # a worker sets up DoFn instances on several threads at once


def freeze_startup_heap() -> None:
    """Collect, then freeze every object now tracked by the GC; later calls in the same process do nothing."""
    pid = os.getpid()
    with _lock:
        if pid in _frozen_in:
            return
        _frozen_in.add(pid)
        gc.collect()
        gc.freeze()
