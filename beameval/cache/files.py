"""The file operations the store and journal need, as an interface: local here, any Beam file system in transforms.

``beameval`` never imports Beam; ``transforms.cache.BeamFiles`` implements ``Files`` on
``FileSystems`` (``gs://``, ``s3://``, local), and ``LocalFiles`` serves plain paths
(tests, the journal of a local run).
"""

from __future__ import annotations

import glob
import os
from typing import IO, Protocol

__all__ = ["Files", "LocalFiles", "is_remote"]


def is_remote(path: str) -> bool:
    """True for a file-system URL (``gs://…``): files there become visible only when closed."""
    return "://" in path


class Files(Protocol):
    """What the response store needs from a file system."""

    def join(self, base: str, *parts: str) -> str:
        """Join path components."""
        ...

    def create(self, path: str) -> IO[bytes]:
        """Open a new file for writing (parents created as needed)."""
        ...

    def open(self, path: str) -> IO[bytes]:
        """Open a file for reading."""
        ...

    def match(self, pattern: str) -> list[str]:
        """The paths matching a glob, sorted; [] when nothing matches."""
        ...

    def exists(self, path: str) -> bool:
        """True when the file exists."""
        ...

    def delete(self, paths: list[str]) -> None:
        """Delete files."""
        ...


class LocalFiles:
    """``Files`` on the local file system."""

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(base, *parts)

    def create(self, path: str) -> IO[bytes]:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return open(path, "wb")  # noqa: SIM115 - the caller closes it

    def open(self, path: str) -> IO[bytes]:
        return open(path, "rb")  # noqa: SIM115 - the caller closes it

    def match(self, pattern: str) -> list[str]:
        return sorted(path for path in glob.glob(pattern) if os.path.isfile(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def delete(self, paths: list[str]) -> None:
        for path in paths:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
