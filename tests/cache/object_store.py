"""A Beam file system with an object store's semantics, for testing the ``gs://`` code paths offline.

``fakegs://BUCKET/NAME`` objects live under a local root directory, but behave as GCS
objects do where the response store cares: an object exists (for ``match``, ``exists``
and ``open``) only once the writer has closed it, there are no directories, and a file
of another file system cannot be copied here by a ``copy`` call (GCS's copy is
server-side, within GCS). Defining the class registers it with Beam's ``FileSystems``
(they find file systems by subclass and ``scheme()``), so importing this module is enough.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from typing import Any, BinaryIO

from apache_beam.io.filesystem import BeamIOError, CompressionTypes, FileMetadata, FileSystem

SCHEME = "fakegs"
PREFIX = f"{SCHEME}://"
#: Where the objects are kept; tests point it at their tmp_path (``use_root``).
ROOT: dict[str, str] = {"path": ""}


def use_root(path: str) -> None:
    """Keep the objects under ``path`` (a test's temporary directory)."""
    ROOT["path"] = path
    os.makedirs(os.path.join(path, ".uploads"), exist_ok=True)


def _local(url: str) -> str:
    if not url.startswith(PREFIX):
        raise BeamIOError(f"not a {SCHEME} URL: {url}")
    assert ROOT["path"], "call object_store.use_root(tmp_path) first"
    return os.path.join(ROOT["path"], "objects", url[len(PREFIX) :])


def _url(local: str) -> str:
    return PREFIX + os.path.relpath(local, os.path.join(ROOT["path"], "objects")).replace(os.sep, "/")


class _Upload:
    """A write channel whose object appears, whole, when it is closed."""

    def __init__(self, destination: str) -> None:
        self._destination = destination
        self._staging = os.path.join(ROOT["path"], ".uploads", uuid.uuid4().hex)
        self._handle = open(self._staging, "wb")  # noqa: SIM115 - closed by close()
        self.closed = False

    def write(self, data: bytes) -> int:
        return self._handle.write(data)

    def flush(self) -> None:
        self._handle.flush()  # an upload's bytes are not visible before close

    def close(self) -> None:
        if not self.closed:
            self._handle.close()
            os.makedirs(os.path.dirname(self._destination), exist_ok=True)
            os.replace(self._staging, self._destination)
            self.closed = True

    def __enter__(self) -> _Upload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeObjectStore(FileSystem):
    """``fakegs://`` on a local directory, visible-on-close like GCS."""

    CHUNK_SIZE = 1

    @classmethod
    def scheme(cls) -> str:
        return SCHEME

    def join(self, basepath: str, *paths: str) -> str:
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path: str) -> None:
        pass  # no directories in an object store

    def has_dirs(self) -> bool:
        return False

    def _list(self, dir_or_prefix: str) -> Iterator[FileMetadata]:
        root = os.path.join(ROOT["path"], "objects")
        prefix = _local(dir_or_prefix)
        for directory, _dirs, names in os.walk(root):
            for name in names:
                path = os.path.join(directory, name)
                if path.startswith(prefix):
                    yield FileMetadata(_url(path), os.path.getsize(path), os.path.getmtime(path))

    def create(
        self, path: str, mime_type: str = "application/octet-stream", compression_type: str = CompressionTypes.AUTO
    ) -> BinaryIO:
        return _Upload(_local(path))  # type: ignore[return-value]  # a write channel, as GCS's is

    def open(
        self, path: str, mime_type: str = "application/octet-stream", compression_type: str = CompressionTypes.AUTO
    ) -> BinaryIO:
        return open(_local(path), "rb")  # noqa: SIM115 - the caller closes it

    def copy(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        for source, destination in zip(source_file_names, destination_file_names, strict=True):
            target = _local(destination)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(_local(source), target)  # both must be fakegs:// URLs, as with GCS

    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        for source, destination in zip(source_file_names, destination_file_names, strict=True):
            os.makedirs(os.path.dirname(_local(destination)), exist_ok=True)  # no directories on an object store
            os.replace(_local(source), _local(destination))

    def exists(self, path: str) -> bool:
        return os.path.isfile(_local(path))

    def size(self, path: str) -> int:
        return os.path.getsize(_local(path))

    def last_updated(self, path: str) -> float:
        return os.path.getmtime(_local(path))

    def checksum(self, path: str) -> str:
        return str(self.size(path))

    def metadata(self, path: str) -> FileMetadata:
        return FileMetadata(path, self.size(path), self.last_updated(path))

    def delete(self, paths: list[str]) -> None:
        for path in paths:
            os.remove(_local(path))

    def report_lineage(self, path: str, lineage: Any) -> None:
        pass
