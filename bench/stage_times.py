"""Where a local run's time goes: CPU, wall and run-queue wait of each fused stage, and the collector's time.

Runs ``python -m pipeline.run`` in this process with the local runner's bundle call
(``FnApiRunner._execute_bundle``) timed: the thread's CPU clock, the wall clock and the
time the thread waited for a core (``/proc/thread-self/schedstat``) around every bundle,
summed per fused stage, plus every cyclic collection (``gc.callbacks``). A stage's wall
time is its CPU plus its wait for a core when it does no I/O; on a shared machine the CPU
seconds are the figure that holds from run to run.

Usage (the arguments after ``--`` are ``pipeline.run``'s)::

    python bench/stage_times.py -- --config cached.yaml --output out --overwrite --cache=store

Prints one line per stage (CPU descending) and the totals to stderr, after the run's own output.
"""

from __future__ import annotations

import atexit
import collections
import gc
import runpy
import sys
import time
from pathlib import Path
from typing import Any

from apache_beam.runners.portability.fn_api_runner import fn_runner

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))


def _run_queue_s() -> float:
    with open("/proc/thread-self/schedstat", encoding="ascii") as handle:
        return int(handle.read().split()[1]) / 1e9


class StageTimes:
    """Per-stage CPU, wall and run-queue seconds of the bundles, and the collector's count and CPU per generation."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = collections.defaultdict(float)
        self.wall: dict[str, float] = collections.defaultdict(float)
        self.wait: dict[str, float] = collections.defaultdict(float)
        self.collections = [0, 0, 0]
        self.collection_cpu = [0.0, 0.0, 0.0]
        self._collecting = 0.0

    def install(self) -> None:
        """Time every bundle the local runner executes from now on, and every collection."""
        execute = fn_runner.FnApiRunner._execute_bundle
        times = self

        def timed(runner: Any, context: Any, bundle_manager: Any, bundle_input: Any) -> Any:
            cpu, wall, wait = time.thread_time(), time.perf_counter(), _run_queue_s()
            try:
                return execute(runner, context, bundle_manager, bundle_input)
            finally:
                name = bundle_manager.stage.name
                times.cpu[name] += time.thread_time() - cpu
                times.wall[name] += time.perf_counter() - wall
                times.wait[name] += _run_queue_s() - wait

        fn_runner.FnApiRunner._execute_bundle = timed
        gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._collecting = time.thread_time()
            return
        generation = info["generation"]
        self.collections[generation] += 1
        self.collection_cpu[generation] += time.thread_time() - self._collecting

    def report(self, started: float) -> str:
        """The per-stage lines (the busiest, and every other of 0.05 s of CPU or more) and the totals."""
        busiest = sorted(self.cpu, key=self.cpu.__getitem__, reverse=True)
        lines = [
            f"{self.cpu[name]:7.2f} s CPU {self.wall[name]:7.2f} s wall {self.wait[name]:6.2f} s waiting  {name[:110]}"
            for rank, name in enumerate(busiest)
            if rank == 0 or self.cpu[name] >= 0.05
        ]
        lines.append(
            f"{sum(self.cpu.values()):7.2f} s CPU {sum(self.wall.values()):7.2f} s wall in bundles; "
            f"process {time.process_time():.2f} s CPU, {time.perf_counter() - started:.2f} s wall; collections "
            f"{self.collections} taking {[round(cpu, 2) for cpu in self.collection_cpu]} s"
        )
        return "\n".join(lines)


def main(argv: list[str]) -> None:
    args = argv[1:] if argv[:1] == ["--"] else argv
    started = time.perf_counter()
    times = StageTimes()
    times.install()
    atexit.register(lambda: print(times.report(started), file=sys.stderr))
    sys.argv = ["pipeline.run", *args]
    runpy.run_module("pipeline.run", run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
