"""CPU measurement for the inference benchmark: a process tree per thread, the test server, the whole machine.

Linux only (/proc). What it tells apart: a client that is CPU-bound (one core per process,
the GIL), one that waits for a CPU (run-queue time from schedstat), and one that waits for
the endpoint.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

from bench.proctree import PeriodicSampler, descendants

__all__ = ["CpuSampler", "children_cpu", "process_cpu"]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def children_cpu() -> tuple[float, float]:
    """CPU seconds of finished children: user + system, and user alone (the part that holds a GIL; syscalls do not)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_utime


def process_cpu(pid: int | None) -> float | None:
    """user + sys seconds of a running process, from /proc/<pid>/stat (the test server)."""
    ticks = None if pid is None else _proc_cpu_ticks(f"/proc/{pid}/stat")
    return None if ticks is None else ticks / CLOCK_TICKS


def _proc_cpu_ticks(path: str) -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def _runqueue_wait_ns(path: str) -> int:
    """Nanoseconds a task spent runnable but waiting for a CPU (field 2 of /proc/.../schedstat)."""
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from the first line of /proc/stat."""
    with open("/proc/stat", encoding="ascii") as handle:
        values = [int(v) for v in handle.readline().split()[1:9]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


class CpuSampler(PeriodicSampler):
    """Samples the machine's CPU and the client's process tree (per process, per thread) every 0.2 s.

    Afterwards ``window(t0, t1)`` gives, over the server's busy window, how busy the whole
    machine was and how many cores the client and the server used, and ``processes()``
    the last CPU seen for each process of the client tree and its busiest threads: enough
    to tell a CPU-bound client (one core per process: the GIL) from one that waits.
    """

    def __init__(self, root: int, server_pid: int | None, interval: float = 0.2) -> None:
        super().__init__(interval)
        self.root = root
        self.server_pid = server_pid
        self.samples: list[tuple[float, int, int, float, float, float]] = []
        self._threads: dict[int, dict[int, int]] = {}
        self._waits: dict[int, dict[int, int]] = {}
        self._commands: dict[int, str] = {}

    def sample(self) -> None:
        busy, total = _machine_ticks()
        tree_ticks, tree_wait = 0, 0
        for pid in descendants(self.root):
            if pid not in self._commands:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        self._commands[pid] = handle.read().replace(b"\0", b" ").decode(errors="replace")[:200]
                except OSError:
                    continue
            threads = self._threads.setdefault(pid, {})
            waits = self._waits.setdefault(pid, {})
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                tids = []
            for tid in tids:
                ticks = _proc_cpu_ticks(f"/proc/{pid}/task/{tid}/stat")
                if ticks is not None:
                    threads[int(tid)] = max(ticks, threads.get(int(tid), 0))
                    wait = _runqueue_wait_ns(f"/proc/{pid}/task/{tid}/schedstat")
                    waits[int(tid)] = max(wait, waits.get(int(tid), 0))
            tree_ticks += sum(threads.values())
            tree_wait += sum(waits.values())
        server = _proc_cpu_ticks(f"/proc/{self.server_pid}/stat") if self.server_pid else None
        self.samples.append(
            (time.time(), busy, total, tree_ticks / CLOCK_TICKS, (server or 0) / CLOCK_TICKS, tree_wait / 1e9)
        )

    def window(self, start: float | None, end: float | None) -> dict[str, Any] | None:
        """Machine CPU use (0-1 of all cores), client/server cores and client run-queue wait over ``[start, end]``."""
        if start is None or end is None:
            return None
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return None
        first, last = inside[0], inside[-1]
        span = last[0] - first[0]
        return {
            "seconds": round(span, 2),
            "machine_cpu_util": round((last[1] - first[1]) / max(1, last[2] - first[2]), 3),
            "client_cores": round((last[3] - first[3]) / span, 2),
            "server_cores": round((last[4] - first[4]) / span, 2),
            "client_runqueue_wait_s": round(last[5] - first[5], 2),
        }

    def processes(self) -> list[dict[str, Any]]:
        """Per process of the client tree: role, CPU seconds (all, main thread, busiest other threads).

        ``runqueue_wait_s`` is the time its threads were ready to run but waited for a CPU
        (from schedstat): a large value means the machine's cores, not the client, set the pace.
        """
        out = []
        for pid, threads in self._threads.items():
            command = self._commands.get(pid, "")
            role = "driver" if pid == self.root else ("sdk worker" if "sdk_worker" in command else "child")
            others = sorted((t for tid, t in threads.items() if tid != pid), reverse=True)[:3]
            out.append(
                {
                    "pid": pid,
                    "role": role,
                    "cpu_s": round(sum(threads.values()) / CLOCK_TICKS, 2),
                    "main_thread_cpu_s": round(threads.get(pid, 0) / CLOCK_TICKS, 2),
                    "top_other_threads_cpu_s": [round(t / CLOCK_TICKS, 2) for t in others],
                    "runqueue_wait_s": round(sum(self._waits.get(pid, {}).values()) / 1e9, 2),
                }
            )
        return sorted(out, key=lambda p: -p["cpu_s"])
