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
from beameval.outputs import lock as lock_module
from beameval.outputs.lock import LEASE_S, LOCK_FILE, Holder, acquire
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


def test_a_lock_from_another_host_is_refused_while_its_lease_is_fresh(tmp_path: Path):
    other = Holder("build-host-7", 4242, time.time() - 3600, "elsewhere", "t", time.time() - 30)
    (tmp_path / LOCK_FILE).write_bytes(other.encode())
    with pytest.raises(OutputError) as refused:
        acquire(str(tmp_path), "here")
    assert "pid 4242 on host build-host-7" in str(refused.value)
    assert f"taken over {LEASE_S:.0f} s after its last renewal" in str(refused.value)
    assert f"delete {str(tmp_path / LOCK_FILE)!r}" in str(refused.value)


def test_a_lock_from_another_host_whose_lease_ran_out_is_taken_over(tmp_path: Path):
    """A run killed on another Airflow worker: the retry on this one takes over once the lease has run out."""
    gone = Holder("build-host-7", 4242, time.time() - 3600, "crashed-elsewhere", "t", time.time() - LEASE_S - 1)
    (tmp_path / LOCK_FILE).write_bytes(gone.encode())
    lock = acquire(str(tmp_path), "retry")
    assert lock.took_over == gone
    lock.release()


def test_the_holder_renews_its_lease(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(lock_module, "RENEW_EVERY_S", 0.05)
    lock = acquire(str(tmp_path), "renewing")
    first = json.loads((tmp_path / LOCK_FILE).read_text())["renewed"]
    deadline = time.monotonic() + 10
    while json.loads((tmp_path / LOCK_FILE).read_text())["renewed"] == first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads((tmp_path / LOCK_FILE).read_text())["renewed"] > first
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_folder_inside_a_locked_output_is_refused(tmp_path: Path):
    """A single-target run on OUT/targets/a while a multi-target run holds OUT would replace a's outputs."""
    holder = hold(tmp_path, 60)
    try:
        inner = tmp_path / "targets" / "a"
        with pytest.raises(OutputError) as refused:
            acquire(str(inner), "single-target")
        message = str(refused.value)
        assert f"is inside {str(tmp_path)!r}" in message and f"pid {holder.pid}" in message
        assert not (inner / LOCK_FILE).exists()
    finally:
        holder.kill()
        holder.wait()
    lock = acquire(str(tmp_path / "targets" / "a"), "after")  # the holder is gone: free
    lock.release()


def test_a_symlink_planted_as_the_lock_file_is_refused_and_its_target_untouched(tmp_path: Path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).symlink_to(victim)
    with pytest.raises(OutputError) as refused:
        acquire(str(out), "run")
    assert f"{str(out / LOCK_FILE)!r} is a symbolic link" in str(refused.value)
    assert victim.read_text() == "keep me"


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
