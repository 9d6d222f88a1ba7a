"""File operations inside OUT_DIR, the same on a local disk and on an object store.

On an object store a folder is only a name prefix: moving, listing, testing and deleting
one means every object under it, and a JSON file appears whole when its upload closes.
"""

from __future__ import annotations

import json
import os
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beameval.core.durable import write_atomically

__all__ = ["children", "delete", "exists", "is_local", "move", "objects_under", "write_json"]


def move(source: str, target: str) -> None:
    """Move a file or folder on OUT_DIR's file system: one rename locally, every object of it on an object store."""
    if is_local(source):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(source, target)  # a folder moves whole: readers see the old run's or the new one's
        return
    objects = objects_under(source)
    if objects:
        FileSystems.rename(objects, [target.rstrip("/") + path[len(source.rstrip("/")) :] for path in objects])
    else:
        FileSystems.rename([source], [target])


def objects_under(folder: str) -> list[str]:
    """Every object below ``folder/`` on an object store, where a folder is only a name prefix."""
    try:
        found = FileSystems.match([FileSystems.join(folder, "**")])[0].metadata_list
    except Exception:  # noqa: BLE001 - nothing under that prefix, on every object store
        return []
    prefix = folder.rstrip("/") + "/"
    return sorted(m.path for m in found if m.path.startswith(prefix) and not m.path.endswith("/"))


def exists(path: str) -> bool:
    """A file or folder exists; on an object store a folder exists while any object lies under it."""
    return bool(FileSystems.exists(path)) or (not is_local(path) and bool(objects_under(path)))


def children(folder: str) -> list[str]:
    """Names directly inside ``folder`` (files and folders), on any file system."""
    if is_local(folder):
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    found = FileSystems.match([FileSystems.join(folder, "**")])[0].metadata_list
    prefix = folder.rstrip("/") + "/"
    return sorted({m.path[len(prefix) :].split("/", 1)[0] for m in found if m.path.startswith(prefix)})


def delete(output: str, names: list[str]) -> None:
    """Delete the entries ``names`` of ``output`` (files or folders); those already gone are skipped."""
    paths = [FileSystems.join(output, name) for name in names]
    if not is_local(output):  # an object store deletes objects, not prefixes
        paths = [found for path in paths for found in objects_under(path) or [path]]
    paths = [path for path in paths if FileSystems.exists(path)]
    if paths:
        FileSystems.delete(paths)


def write_json(path: str, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON so that a reader sees the old file or the whole new one, never a part."""
    payload = json.dumps(data, indent=2).encode("utf-8")
    if is_local(path):
        write_atomically(path, payload)
        return
    with FileSystems.create(path) as handle:  # an object appears whole when its upload closes
        handle.write(payload)


def is_local(path: str) -> bool:
    """A path on this machine's disk (no ``scheme://``)."""
    return "://" not in path
