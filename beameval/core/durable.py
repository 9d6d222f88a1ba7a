"""Local writes that survive a crash: fsync of file and directory, write-then-rename, an atomic swap.

A file is durable once its bytes are fsynced *and* the directory entry that names it is:
``os.replace`` alone can leave, after a power cut, an empty file under the new name or
the old name back. ``atomic_file`` writes under a temporary name in the same directory
(never matched by the readers' ``*.jsonl`` or the outputs' fixed names), fsyncs it,
renames it into place and fsyncs the directory, so a reader, and a reboot, see the old
file or the whole new one. A temporary left by a kill is removed by the next writer of
that folder that cleans up (``stale_temporaries``).

``exchange`` swaps two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``), which is
how a published folder is replaced by its new version without a moment where neither
exists; callers fall back to rename-aside-then-rename where the system lacks it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

__all__ = [
    "TEMPORARY_SUFFIX",
    "atomic_file",
    "disk_full",
    "exchange",
    "fsync_directory",
    "stale_temporaries",
    "write_atomically",
]

#: How a temporary file's name ends: ``<final name>.<random>.tmp``.
TEMPORARY_SUFFIX = ".tmp"
#: The errors of a full disk or an exhausted quota.
_FULL = (errno.ENOSPC, errno.EDQUOT)
_RENAME_EXCHANGE = 2


def fsync_directory(path: str) -> None:
    """Make the names in directory ``path`` durable (a created, renamed or removed entry).

    File systems that cannot sync a directory (some network and FUSE ones) answer EINVAL
    or ENOTSUP; their durability is theirs, so that is not an error here.
    """
    fd = os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


@contextmanager
def atomic_file(path: str) -> Iterator[IO[bytes]]:
    """Yield a handle whose bytes appear at ``path`` whole, and durably, when the block ends without error.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    temporary = f"{path}.{uuid.uuid4().hex[:12]}{TEMPORARY_SUFFIX}"
    try:
        with open(temporary, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise
    fsync_directory(directory)


def write_atomically(path: str, payload: bytes) -> None:
    """Write ``payload`` to ``path`` with ``atomic_file``."""
    with atomic_file(path) as handle:
        handle.write(payload)


def stale_temporaries(directory: str, older_than_s: float = 3600.0) -> list[str]:
    """Temporary files of ``atomic_file`` in ``directory`` left by writers that died over ``older_than_s`` ago."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    cutoff = time.time() - older_than_s
    found = []
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(TEMPORARY_SUFFIX):
            try:
                if os.path.getmtime(path) < cutoff:
                    found.append(path)
            except FileNotFoundError:
                continue
    return sorted(found)


def exchange(first: str, second: str) -> bool:
    """Swap two existing paths atomically; False (nothing done) where the system or file system cannot.

    Raises:
        OSError: the swap is supported but failed (a path is missing, no permission, ...).
    """
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    at_cwd = -100  # AT_FDCWD
    if renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), first)


def disk_full(exc: BaseException) -> OSError | None:
    """The full-disk (or over-quota) ``OSError`` in ``exc``'s cause chain, if there is one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL:
            return current
        current = current.__cause__ or current.__context__
    return None


@functools.cache
def _renameat2() -> Any:
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name, use_errno=True).renameat2
    except (OSError, AttributeError, TypeError):  # no libc by that name, or a libc older than glibc 2.28
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
