"""One asyncio loop per worker process, in a daemon thread, shared by all engines (fewer threads vying for the GIL)."""

from __future__ import annotations

import asyncio
import os
import threading

__all__ = ["background_loop", "stop_background_loop"]

_lock = threading.Lock()
_state: dict[str, object] = {}


def _run(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
    finally:
        loop.close()


def background_loop() -> asyncio.AbstractEventLoop:
    """Return the process's inference event loop, starting it on first use (and again after a fork)."""
    pid = os.getpid()
    with _lock:
        loop = _state.get("loop")
        if isinstance(loop, asyncio.AbstractEventLoop) and _state.get("pid") == pid and not loop.is_closed():
            return loop
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        thread = threading.Thread(target=_run, args=(loop, ready), name="inference-loop", daemon=True)
        thread.start()
        ready.wait()
        _state.update(loop=loop, thread=thread, pid=pid)
        return loop


def stop_background_loop(timeout: float = 5.0) -> None:
    """Stop and close this process's loop, if one is running (engines should be closed first)."""
    with _lock:
        loop = _state.pop("loop", None)
        thread = _state.pop("thread", None)
        pid = _state.pop("pid", None)
    if not isinstance(loop, asyncio.AbstractEventLoop) or pid != os.getpid() or loop.is_closed():
        return
    loop.call_soon_threadsafe(loop.stop)
    if isinstance(thread, threading.Thread) and thread is not threading.current_thread():
        thread.join(timeout)
