"""One run at a time per output directory: a lock file naming its holder (host, pid, start time, run id).

Local directories: ``OUT_DIR/_lock.json`` is held with ``flock``, which the kernel releases
when the holder dies however it dies (kill -9 included), so a live holder is told from a
dead one without guessing. The file also names the holder, for the refusal message and
for the takeover: a run that gets the ``flock`` while the file still names another
process of this host knows that process died without cleaning up (or never held it on a
file system without ``flock``, where the pid is checked instead) and says it took over.
A holder on another host cannot be checked from here, so every holder keeps a lease: it
rewrites its record (``renewed``) every ``RENEW_EVERY_S`` seconds while it runs, and a record
of another host not renewed for ``LEASE_S`` seconds is taken over by the next run, which says
so (the documented Airflow retry after a crash on another worker then just works). A live
run's lock is never taken: its lease is fresh.

The lock covers the job: a run on a folder inside a locked OUT_DIR (``OUT/targets/NAME`` of a
live multi-target run) is refused like a second run on OUT_DIR itself. The lock file is
opened without following symbolic links: a link planted at its name is an error naming it,
and nothing it points to is touched.

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
import threading
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

__all__ = ["LEASE_S", "LOCK_FILE", "RENEW_EVERY_S", "Holder", "OutputLock", "acquire", "refuse_symlink"]

#: The lock's name inside the output directory.
LOCK_FILE = "_lock.json"
#: How often a holder renews its lease, and how long an unrenewed lease of another host lasts.
RENEW_EVERY_S = 10.0
LEASE_S = 60.0
#: A local record is written padded to this size, so a renewal overwrites it in place in one write.
_RECORD_BYTES = 512
_RETRIES = 5
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass(frozen=True)
class Holder:
    """Who holds an output directory."""

    host: str
    pid: int
    started: float
    run_id: str
    token: str = ""  # tells two records of one host and pid apart (an object store's read-back)
    renewed: float = 0.0  # the lease: when the holder last said it is alive (0: as started)

    def describe(self) -> str:
        """``pid 123 on host h, started 2026-01-01T00:00:00Z (run abc)``."""
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started))
        return f"pid {self.pid} on host {self.host}, started {started} (run {self.run_id})"

    def encode(self) -> bytes:
        """The lock file's content."""
        return json.dumps(asdict(self)).encode("utf-8")

    def lease_expired(self, now: float) -> bool:
        """Not renewed for ``LEASE_S`` seconds: the holder is gone (or cut off from the output)."""
        return now - max(self.renewed, self.started) > LEASE_S


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
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, name="output-lock-lease", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        """Rewrite the record every ``RENEW_EVERY_S`` seconds until released (the lease of ``LEASE_S``)."""
        while not self._stop.wait(RENEW_EVERY_S):
            renewed = Holder(**{**asdict(self.holder), "renewed": time.time()})
            try:
                if self._fd is not None:
                    _write_record(self._fd, renewed)
                elif self._files is not None:
                    with self._files.create(self.path) as handle:
                        handle.write(renewed.encode())
            except (OSError, ValueError):  # closed by release meanwhile, or the store is briefly away
                continue
            self.holder = renewed

    def release(self) -> None:
        """Remove the lock file (if it is still this run's) and let go of it; a second call does nothing."""
        self._stop.set()
        if self._renewer.is_alive() and self._renewer is not threading.current_thread():
            self._renewer.join()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                if _same_file(fd, self.path):
                    os.remove(self.path)
            finally:
                os.close(fd)
        elif self._files is not None:
            files, self._files = self._files, None
            current = _read_holder(files, self.path)
            if current is not None and current.token == self.holder.token:
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
    now = time.time()
    me = Holder(socket.gethostname(), os.getpid(), now, run_id, uuid.uuid4().hex, now)
    if is_remote(directory):
        assert files is not None, "a file-system URL needs its Files"
        _refuse_locked_ancestor_object(files, directory, me)
        return _acquire_object(files, files.join(directory, LOCK_FILE), me)
    _refuse_locked_ancestor(directory, me)
    return _acquire_local(directory, me)


def refuse_symlink(path: str, what: str) -> None:
    """Raise when ``path`` is a symbolic link: the evaluator never writes through one it did not make.

    Raises:
        OutputError: naming the link and where it points.
    """
    if os.path.islink(path):
        raise OutputError(
            f"{what} {path!r} is a symbolic link (to {os.readlink(path)!r}); the evaluator creates it itself and "
            "never writes through a link: remove the link (nothing it points to was touched) and rerun."
        )


def _refuse_locked_ancestor(directory: str, me: Holder) -> None:
    """Refuse a folder inside an output directory that a live run holds (the job's lock covers its folders)."""
    here = os.path.abspath(directory)
    parent = os.path.dirname(here)
    while parent != here:
        here, parent = parent, os.path.dirname(parent)
        path = os.path.join(here, LOCK_FILE)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | _NO_FOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            try:
                locked, live = _flock(fd, shared=True), False
            except BlockingIOError:
                locked, live = False, True
            holder = _parse(_read_fd(fd))
        finally:
            os.close(fd)
        if holder is not None and not live:
            if holder.host == me.host:  # a free flock says the holder is gone; without flock the pid decides
                live = not locked and _alive(holder.pid)
            else:
                live = not holder.lease_expired(me.started)
        if live:
            raise _inside(directory, here, holder)


def _refuse_locked_ancestor_object(files: Files, directory: str, me: Holder) -> None:
    """:func:`_refuse_locked_ancestor` on an object store: the parents' records and their leases decide."""
    scheme, _, rest = directory.partition("://")
    parts = rest.rstrip("/").split("/")
    for end in range(len(parts) - 1, 1, -1):  # never the bucket itself
        parent = f"{scheme}://{'/'.join(parts[:end])}"
        holder = _read_holder(files, files.join(parent, LOCK_FILE))
        if holder is None:
            continue
        same_host_alive = holder.host == me.host and _alive(holder.pid)
        if same_host_alive or (holder.host != me.host and not holder.lease_expired(me.started)):
            raise _inside(directory, parent, holder)


def _inside(directory: str, parent: str, holder: Holder | None) -> OutputError:
    who = holder.describe() if holder is not None else "a run that is still writing its details"
    return OutputError(
        f"output directory {directory!r} is inside {parent!r}, which is in use by another run: {who}; a run's lock "
        "covers every folder inside its output directory (a multi-target run's targets/NAME included): wait for it "
        "to finish, or choose an --output outside it."
    )


def _acquire_local(directory: str, me: Holder) -> OutputLock:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOCK_FILE)
    for _ in range(_RETRIES):
        refuse_symlink(path, "the lock file")
        created = not os.path.exists(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _NO_FOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a link planted between the check and the open
                refuse_symlink(path, "the lock file")
            raise
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
            _write_record(fd, me)
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
        if not previous.lease_expired(me.started):
            raise _held(directory, path, previous, other_host=True)
        return previous
    if not locked and _alive(previous.pid):  # no flock here: a live pid of this host still holds it
        raise _held(directory, path, previous)
    return previous


def _acquire_object(files: Files, path: str, me: Holder) -> OutputLock:
    previous = _read_holder(files, path)
    took_over = None
    if previous is not None:
        if previous.host != me.host:
            if not previous.lease_expired(me.started):
                raise _held(path.rsplit("/", 1)[0], path, previous, other_host=True)
        elif _alive(previous.pid):
            raise _held(path.rsplit("/", 1)[0], path, previous)
        took_over = previous
    with files.create(path) as handle:
        handle.write(me.encode())
    winner = _read_holder(files, path)
    if winner is None or winner.token != me.token:  # another run wrote its record after ours
        raise _held(path.rsplit("/", 1)[0], path, winner)
    return OutputLock(path, me, took_over, None, files)


def _held(directory: str, path: str, holder: Holder | None, other_host: bool = False) -> OutputError:
    who = holder.describe() if holder is not None else "a run that is still writing its details"
    remedy = "wait for it to finish, or choose another --output"
    if other_host and holder is not None:
        expires = time.strftime("%H:%M:%SZ", time.gmtime(max(holder.renewed, holder.started) + LEASE_S))
        remedy += (
            f"; it renews its lease every {RENEW_EVERY_S:.0f} s, and if that run is gone its lock is taken over "
            f"{LEASE_S:.0f} s after its last renewal (at {expires}), or at once if you delete {path!r}"
        )
    return OutputError(f"output directory {directory!r} is in use by another run: {who}; {remedy}.")


def _write_record(fd: int, holder: Holder) -> None:
    """Write ``holder`` over the lock file's record in one write (padded: JSON ignores trailing spaces)."""
    record = holder.encode().ljust(_RECORD_BYTES)
    os.pwrite(fd, record, 0)
    os.ftruncate(fd, len(record))
    os.fsync(fd)


def _flock(fd: int, shared: bool = False) -> bool:
    """Take the flock without waiting; False where the file system has none (the pid check decides)."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
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
            str(data["host"]),
            int(data["pid"]),
            float(data["started"]),
            str(data["run_id"]),
            str(data.get("token", "")),
            float(data.get("renewed", 0.0)),
        )
    except (ValueError, KeyError, TypeError):
        return None
