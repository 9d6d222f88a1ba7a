"""Loopback-only gRPC binds for the servers Beam opens during a local run.

Beam's FnApiRunner opens its control, data, state and logging servers for SDK worker
processes on ``[::]:0`` (every interface), and the LOOPBACK worker pool of a
``PortableRunner`` does the same, though each tells its workers to connect to
``localhost:PORT``. These are unauthenticated gRPC services (a peer that reaches the
control port can pose as a worker and receive the job's pickled code and data; one that
reaches a worker pool can make it run code), and Beam has no flag to bind them elsewhere.
While ``loopback_binds()`` is active, a wildcard bind (``[::]``, ``0.0.0.0``) in this
process becomes ``localhost``, which gRPC binds on 127.0.0.1 and ::1 only. Servers bound
to a named host are left as asked.

``python -m pipeline.loopback MODULE [ARGS...]`` runs another module's ``__main__`` the same
way, for the servers one starts beside a run: Beam's Python job service
(``apache_beam.runners.portability.local_job_service_main``) or a worker pool
(``apache_beam.runners.worker.worker_pool_main``).
"""

from __future__ import annotations

import runpy
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc._server

__all__ = ["loopback_address", "loopback_binds"]

_WILDCARDS = ("[::]:", "0.0.0.0:")
_lock = threading.Lock()
_active = 0  # nested or concurrent local runs in this process; the original method is restored by the last
_original: Callable[[Any, str], int] | None = None


def loopback_address(address: str) -> str:
    """``address`` with a wildcard host (``[::]:P``, ``0.0.0.0:P``) replaced by ``localhost``."""
    for wildcard in _WILDCARDS:
        if address.startswith(wildcard):
            return "localhost:" + address[len(wildcard) :]
    return address


@contextmanager
def loopback_binds() -> Iterator[None]:
    """Within the block, every gRPC server this process opens on a wildcard host binds loopback only."""
    global _active, _original
    with _lock:
        if _active == 0:
            original = grpc._server._Server.add_insecure_port
            _original = original

            def add_insecure_port(self: Any, address: str) -> int:
                return int(original(self, loopback_address(address)))

            grpc._server._Server.add_insecure_port = add_insecure_port
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _original is not None:
                grpc._server._Server.add_insecure_port = _original
                _original = None


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m pipeline.loopback MODULE [ARGS...]  (MODULE's gRPC servers bind loopback only)")
    sys.argv = sys.argv[1:]
    with loopback_binds():
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
