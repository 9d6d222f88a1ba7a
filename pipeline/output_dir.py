"""The output directory: refuse to mix runs, clear on --overwrite, fail early if unwritable."""

from __future__ import annotations

import os

from apache_beam.io.filesystems import FileSystems

from beameval.core.errors import OutputError

__all__ = ["OUTPUT_ENTRIES", "prepare_output"]

OUTPUT_ENTRIES = ("results.json", "_summary.json", "rows", "errors")


def prepare_output(output: str, overwrite: bool) -> None:
    """Make ``output`` ready for a new run.

    Raises:
        OutputError: it already holds outputs and ``overwrite`` is False, or it cannot be written.
    """
    _refuse_local_file(output)
    existing = [
        name for name in OUTPUT_ENTRIES if FileSystems.match([FileSystems.join(output, name) + "*"])[0].metadata_list
    ]
    if existing and not overwrite:
        raise OutputError(
            f"output directory {output!r} already holds outputs ({', '.join(existing)}); "
            "pass --overwrite to replace them or choose another --output."
        )
    try:
        for name in existing:
            paths = [m.path for m in FileSystems.match([FileSystems.join(output, name) + "*"])[0].metadata_list]
            FileSystems.delete(paths)
        FileSystems.mkdirs(output) if not FileSystems.exists(output) else None
        probe = FileSystems.join(output, ".write-probe")
        with FileSystems.create(probe) as handle:
            handle.write(b"ok")
        FileSystems.delete([probe])
    except OutputError:
        raise
    except Exception as exc:  # noqa: BLE001 - every file system raises its own errors
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise OutputError(
            f"cannot write to output directory {output!r}: {reason}; check the path and its permissions."
        ) from None


def _refuse_local_file(output: str) -> None:
    """A local --output, or the nearest existing folder above it, must not be a regular file."""
    if "://" in output:
        return
    path = os.path.abspath(output)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if os.path.exists(path) and not os.path.isdir(path):
        where = "it is a file" if path == os.path.abspath(output) else f"{path!r} is a file"
        raise OutputError(
            f"cannot use {output!r} as the output directory: {where}, not a directory; choose another --output."
        )
