"""A local run listens on loopback only: no socket of the run's processes binds every interface.

Beam's FnApiRunner opens its control, data, state and logging gRPC servers for
``--direct_running_mode=multi_processing`` workers on ``[::]:0``; the evaluator's local
runner binds them to loopback (``pipeline.loopback``). The test watches the listening TCP
sockets of this process and every descendant (``/proc``) while a multi-processing run is
in flight, and checks that it saw the runner's servers and that none is a wildcard.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from pipeline.loopback import loopback_address

WILDCARDS = {"0.0.0.0", "::"}


def _descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (from each process's parent in ``/proc/PID/stat``)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = {child for child, ppid in parents.items() if ppid == parent} - found
        found |= children
        frontier += children
    return found


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:  # the process ended meanwhile
            continue
    return inodes


def listening_sockets(pids: set[int]) -> set[tuple[str, int]]:
    """(host, port) of every TCP socket in LISTEN state that one of ``pids`` holds (Linux ``/proc/net``)."""
    inodes = _socket_inodes(pids)
    sockets = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(table) as handle:
            next(handle)
            for line in handle:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
                sockets.add((socket.inet_ntop(family, raw), int(port, 16)))
    return sockets


class SocketWatcher(threading.Thread):
    """Collects the listening sockets of this process tree every 200 ms until stopped."""

    def __init__(self, exclude: set[int]) -> None:
        super().__init__(daemon=True)
        self.exclude = exclude  # ports that were listening before (the test server's among them)
        self.seen: set[tuple[str, int]] = set()
        self.pids: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            pids = _descendants(os.getpid())
            self.pids |= pids
            self.seen |= {s for s in listening_sockets(pids) if s[1] not in self.exclude}


def test_loopback_address_rewrites_wildcards_only() -> None:
    assert loopback_address("[::]:0") == "localhost:0"
    assert loopback_address("0.0.0.0:8099") == "localhost:8099"
    assert loopback_address("10.0.0.5:50000") == "10.0.0.5:50000"
    assert loopback_address("localhost:0") == "localhost:0"


def test_multi_processing_run_listens_on_loopback_only(clean_server, model_target, write_jsonl, run_eval) -> None:
    clean_server.configure(latency_ms=40)
    rows = [{"question": f"answer {i % 7}", "answer": f"answer {i % 3}"} for i in range(60)]
    config = {
        "dataset": {"path": str(write_jsonl(rows))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 2},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    watcher = SocketWatcher(exclude={port for _, port in listening_sockets(_descendants(os.getpid()))})
    watcher.start()
    try:
        result = run_eval(config, "--direct_running_mode=multi_processing", "--direct_num_workers=1")
    finally:
        watcher.done.set()
        watcher.join()
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 60, "ok": 60, "errors": 0}
    assert len(watcher.pids) >= 2, watcher.pids  # this process and its SDK worker were watched
    # The runner's control, data, state and logging servers were seen, each on loopback only.
    ports = {port for _, port in watcher.seen}
    assert len(ports) >= 4, watcher.seen
    wildcard = {s for s in watcher.seen if s[0] in WILDCARDS}
    assert not wildcard, f"listening on every interface: {sorted(wildcard)}"
    assert {host for host, _ in watcher.seen} <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, watcher.seen
