"""One run at a time per output directory: a lock file naming its holder (host, pid, start time, run id).

Local directories: ``OUT_DIR/_lock.json`` is held with ``flock``, which the kernel releases
when the holder dies however it dies (kill -9 included), so a live holder is told from a
dead one without guessing. The file also names the holder, for the refusal message and
for the takeover: a run that gets the ``flock`` while the file still names another
process of this host knows that process died without cleaning up (or never held it on a
file system without ``flock``, where the pid is checked instead) and says it took over.
A holder on another host cannot be checked from here: such a lock is refused, and the
message says which file to delete if that run is gone.

Object stores (``gs://``, ``s3://``) have no ``flock``, and Beam's ``FileSystems`` offers
no conditional create (GCS's ``ifGenerationMatch=0``, S3's ``If-None-Match``), so there the
lock is a best-effort object: written when absent or stale, then read back, and refused if
another run's record won. Two runs started within the same second or so can both pass;
the README states the limit.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from beameval.cache.files import Files, is_remote
from beameval.core.durable import fsync_directory
from beameval.core.errors import OutputError

try:  # not on Windows: there the pid check alone decides
    import fcntl
except ImportError:  # pragma: no cover - POSIX everywhere this project runs
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_FILE", "Holder", "OutputLock", "acquire"]

#: The lock's name inside the output directory.
LOCK_FILE = "_lock.json"
_RETRIES = 5


@dataclass(frozen=True)
class Holder:
    """Who holds an output directory."""

    host: str
    pid: int
    started: float
    run_id: str
    token: str = ""  # tells two records of one host and pid apart (an object store's read-back)

    def describe(self) -> str:
        """``pid 123 on host h, started 2026-01-01T00:00:00Z (run abc)``."""
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started))
        return f"pid {self.pid} on host {self.host}, started {started} (run {self.run_id})"

    def encode(self) -> bytes:
        """The lock file's content."""
        return json.dumps(asdict(self)).encode("utf-8")


class OutputLock:
    """A held output-directory lock; ``release`` gives it up (the kernel does so if the process dies).

    Attributes:
        path: the lock file.
        holder: this run's record.
        took_over: the record of a dead run whose lock this one took over, or None.
    """

    def __init__(self, path: str, holder: Holder, took_over: Holder | None, fd: int | None, files: Files | None):
        self.path = path
        self.holder = holder
        self.took_over = took_over
        self._fd = fd
        self._files = files

    def release(self) -> None:
        """Remove the lock file (if it is still this run's) and let go of it; a second call does nothing."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                if _same_file(fd, self.path):
                    os.remove(self.path)
            finally:
                os.close(fd)
        elif self._files is not None:
            files, self._files = self._files, None
            if _read_holder(files, self.path) == self.holder:
                files.delete([self.path])


def acquire(directory: str, run_id: str, files: Files | None = None) -> OutputLock:
    """Take the lock of ``directory`` for this process (creating the directory when it is local and missing).

    Args:
        directory: the output directory, local or a file-system URL.
        run_id: this run's id, recorded in the lock.
        files: the file system for a URL (``transforms.cache.files_for``).

    Raises:
        OutputError: a live run holds the directory, or a run on another host does (named in the message).
    """
    me = Holder(socket.gethostname(), os.getpid(), time.time(), run_id, uuid.uuid4().hex)
    if is_remote(directory):
        assert files is not None, "a file-system URL needs its Files"
        return _acquire_object(files, files.join(directory, LOCK_FILE), me)
    return _acquire_local(directory, me)


def _acquire_local(directory: str, me: Holder) -> OutputLock:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOCK_FILE)
    for _ in range(_RETRIES):
        created = not os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            locked = _flock(fd)
        except BlockingIOError:
            holder = _read_fd_when_written(fd)
            os.close(fd)
            raise _held(directory, path, holder) from None
        if not _same_file(fd, path):  # the holder removed it between our open and flock: try the new one
            os.close(fd)
            continue
        previous = _parse(_read_fd(fd))
        try:
            took_over = _stale_or_refuse(directory, path, previous, me, locked)
            os.ftruncate(fd, 0)
            os.pwrite(fd, me.encode(), 0)
            os.fsync(fd)
            if created:
                fsync_directory(directory)
        except BaseException:
            os.close(fd)
            raise
        return OutputLock(path, me, took_over, fd, None)
    raise OutputError(f"cannot take the lock {path!r}: it keeps being replaced; is another run starting there?")


def _stale_or_refuse(directory: str, path: str, previous: Holder | None, me: Holder, locked: bool) -> Holder | None:
    """None when the lock was free; the dead holder's record when it is taken over; else raise."""
    if previous is None:
        return None
    if previous.host != me.host:
        raise _held(directory, path, previous, other_host=True)
    if not locked and _alive(previous.pid):  # no flock here: a live pid of this host still holds it
        raise _held(directory, path, previous)
    return previous


def _acquire_object(files: Files, path: str, me: Holder) -> OutputLock:
    previous = _read_holder(files, path)
    took_over = None
    if previous is not None:
        if previous.host != me.host:
            raise _held(path.rsplit("/", 1)[0], path, previous, other_host=True)
        if _alive(previous.pid):
            raise _held(path.rsplit("/", 1)[0], path, previous)
        took_over = previous
    with files.create(path) as handle:
        handle.write(me.encode())
    winner = _read_holder(files, path)
    if winner != me:  # another run wrote its record after ours
        raise _held(path.rsplit("/", 1)[0], path, winner)
    return OutputLock(path, me, took_over, None, files)


def _held(directory: str, path: str, holder: Holder | None, other_host: bool = False) -> OutputError:
    who = holder.describe() if holder is not None else "a run that is still writing its details"
    remedy = "wait for it to finish, or choose another --output"
    if other_host:
        remedy += f"; if that run is no longer running, delete {path!r} (a run on another host cannot be checked)"
    return OutputError(f"output directory {directory!r} is in use by another run: {who}; {remedy}.")


def _flock(fd: int) -> bool:
    """Take the flock without waiting; False where the file system has none (the pid check decides)."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise BlockingIOError(exc.errno, exc.strerror) from None
        return False  # ENOLCK, EOPNOTSUPP: a file system without locks
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _read_fd(fd: int) -> bytes:
    return os.pread(fd, 1 << 16, 0)


def _read_fd_when_written(fd: int) -> Holder | None:
    """The holder's record; a holder that has just created the file gets a moment to write it."""
    for _ in range(20):
        holder = _parse(_read_fd(fd))
        if holder is not None:
            return holder
        time.sleep(0.01)  # the holder writes its record right after taking the flock
    return None


def _read_holder(files: Files, path: str) -> Holder | None:
    if not files.exists(path):
        return None
    try:
        with files.open(path) as handle:
            return _parse(handle.read())
    except FileNotFoundError:
        return None


def _parse(content: bytes) -> Holder | None:
    try:
        data: Any = json.loads(content)
        return Holder(
            str(data["host"]), int(data["pid"]), float(data["started"]), str(data["run_id"]), str(data.get("token", ""))
        )
    except (ValueError, KeyError, TypeError):
        return None
