"""OUT_DIR's lock alone: a live holder refused by name, a dead one's lock taken over, on an object store too.

The holders are real processes: one that holds the lock while the test tries it, one
killed with SIGKILL (what kill -9 leaves: the file, not the flock).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from beameval.core.errors import OutputError
from beameval.outputs.lock import LOCK_FILE, Holder, acquire
from tests.cache import object_store
from transforms.cache import BeamFiles

HOLD = textwrap.dedent(
    """
    import sys, time
    from beameval.outputs.lock import acquire
    lock = acquire(sys.argv[1], "holder-run")
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    """
)


def hold(directory: Path, seconds: float) -> subprocess.Popen[str]:
    """A process that takes the lock, says so, and holds it for ``seconds`` (or until killed)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_a_live_holder_is_refused_by_host_pid_and_start_time_and_its_file_is_left_alone(tmp_path: Path):
    holder = hold(tmp_path, 60)
    try:
        before = (tmp_path / LOCK_FILE).read_bytes()
        with pytest.raises(OutputError) as refused:
            acquire(str(tmp_path), "second-run")
        message = str(refused.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message
        assert "run holder-run" in message and "started 20" in message and "--output" in message
        assert (tmp_path / LOCK_FILE).read_bytes() == before
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_killed_process_is_taken_over_and_named(tmp_path: Path):
    holder = hold(tmp_path, 60)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid  # kill -9 left the file
    lock = acquire(str(tmp_path), "next-run")
    assert lock.took_over is not None and lock.took_over.pid == holder.pid
    assert json.loads((tmp_path / LOCK_FILE).read_text())["run_id"] == "next-run"
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()
    again = acquire(str(tmp_path), "third-run")  # a released lock is simply free
    assert again.took_over is None
    again.release()


def test_a_released_lock_can_be_taken_at_once_by_another_process(tmp_path: Path):
    holder = hold(tmp_path, 0)
    assert holder.wait(timeout=30) == 0  # exited: the kernel dropped its flock, the file stays
    lock = acquire(str(tmp_path), "after")
    assert lock.took_over is not None and lock.took_over.run_id == "holder-run"
    lock.release()


def test_a_lock_from_another_host_is_refused_with_the_file_to_delete(tmp_path: Path):
    other = Holder("build-host-7", 4242, time.time() - 60, "elsewhere", "t")
    (tmp_path / LOCK_FILE).write_bytes(other.encode())
    with pytest.raises(OutputError) as refused:
        acquire(str(tmp_path), "here")
    assert "pid 4242 on host build-host-7" in str(refused.value)
    assert f"delete {str(tmp_path / LOCK_FILE)!r}" in str(refused.value)


def test_on_an_object_store_a_live_holder_is_refused_and_a_dead_ones_lock_taken_over(tmp_path: Path):
    object_store.use_root(str(tmp_path / "fakegs"))
    files = BeamFiles()
    output = f"{object_store.PREFIX}bucket/out"
    first = acquire(output, "first", files)
    with pytest.raises(OutputError, match=f"pid {os.getpid()} on host"):
        acquire(output, "second", files)  # this very process is alive
    first.release()
    assert not files.exists(f"{output}/{LOCK_FILE}")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = Holder(socket.gethostname(), int(dead.stdout), time.time(), "crashed", "t")
    with files.create(f"{output}/{LOCK_FILE}") as handle:
        handle.write(stale.encode())
    taken = acquire(output, "third", files)
    assert taken.took_over == stale
    taken.release()
