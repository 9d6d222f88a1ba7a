"""The output directory: one run's outputs at a time, replaced whole, and nothing else touched.

A run writes ``rows/``, ``errors/`` and its summary into a staging folder inside OUT_DIR
(``_staging-<run id>/``) and moves them into place only when the pipeline has finished, so
a reader of ``rows/`` never sees half of one run and half of another, and a crashed run
leaves the previous outputs as they were. The manifest (``_manifest.json``) lists what the
run wrote; ``--overwrite`` removes exactly those entries (or, for outputs from before the
manifest, the fixed names of README "Outputs") and leaves any other file or folder alone.
"""

from __future__ import annotations

import json
import os
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beameval.core.errors import OutputError

__all__ = ["JOURNAL_ENTRY", "MANIFEST_FILE", "prepare_output", "publish_outputs", "staging_dir"]

MANIFEST_FILE = "_manifest.json"
#: The response journal (``beameval.cache.journal.JOURNAL_DIR``): what ``--resume`` keeps.
JOURNAL_ENTRY = "_responses"
#: What a run of this program writes into OUT_DIR; a run before manifests existed wrote these.
RUN_ENTRIES = (
    "results.json",
    "_summary.json",
    "_provenance.json",
    "report.html",
    "rows",
    "errors",
    JOURNAL_ENTRY,
    MANIFEST_FILE,
)
_STAGING_PREFIX = "_staging-"


def staging_dir(output: str, run_id: str) -> str:
    """Where a run's pipeline writes its outputs before they are moved into place."""
    return FileSystems.join(output, f"{_STAGING_PREFIX}{run_id}")


def prepare_output(output: str, overwrite: bool, resume: bool = False) -> None:
    """Make ``output`` ready for a new run; the earlier run's outputs stay until this one publishes.

    With ``resume`` the earlier run's response journal is kept (the new run answers from it);
    with ``overwrite`` it is removed now, since the new run starts recording at once.

    Raises:
        OutputError: it already holds outputs and neither ``overwrite`` nor ``resume`` is set, or it
            cannot be written.
    """
    _refuse_local_file(output)
    try:
        existing = _earlier_entries(output)
        if existing and not overwrite and not resume:
            raise OutputError(
                f"output directory {output!r} already holds outputs ({', '.join(existing)}); "
                "pass --resume to continue that run without paying again for the responses it recorded, "
                "--overwrite to replace them, or choose another --output."
            )
        if overwrite and not resume and JOURNAL_ENTRY in existing:
            _delete(output, [JOURNAL_ENTRY])
        _delete(output, _stale_staging(output))  # folders of runs that crashed before publishing
        if not FileSystems.exists(output):
            FileSystems.mkdirs(output)
        probe = FileSystems.join(output, ".write-probe")
        with FileSystems.create(probe) as handle:
            handle.write(b"ok")
        FileSystems.delete([probe])
    except OutputError:
        raise
    except Exception as exc:  # noqa: BLE001 - every file system raises its own errors
        raise _unwritable(output, exc) from None


def publish_outputs(output: str, stage: str, run_id: str) -> None:
    """Replace the earlier run's outputs with the staged ones and record what this run wrote.

    The manifest is written before anything is moved, listing this run's entries and the
    fixed names results.json and report.html will take, so an interruption part-way leaves
    a directory that the next ``--overwrite`` still cleans completely.
    """
    staged = sorted(_children(stage))
    entries = sorted({*staged, "results.json", "report.html", JOURNAL_ENTRY, MANIFEST_FILE})
    earlier = [name for name in _earlier_entries(output) if name not in (JOURNAL_ENTRY, MANIFEST_FILE)]
    _write_json(FileSystems.join(output, MANIFEST_FILE), {"run_id": run_id, "entries": entries})
    _delete(output, earlier)
    for name in staged:
        source, target = FileSystems.join(stage, name), FileSystems.join(output, name)
        if _is_local(output):
            os.replace(source, target)  # a folder moves whole: readers see the old run's or the new one's
            continue
        files = [m.path for m in FileSystems.match([FileSystems.join(source, "*")])[0].metadata_list]
        if files:
            FileSystems.rename(files, [FileSystems.join(target, os.path.basename(f)) for f in files])
        else:
            FileSystems.rename([source], [target])
    _delete(output, [os.path.basename(stage.rstrip("/"))])


def _earlier_entries(output: str) -> list[str]:
    """What an earlier run of this program left in ``output`` (from its manifest, else by the fixed names)."""
    manifest = FileSystems.join(output, MANIFEST_FILE)
    names: set[str] = set()
    if FileSystems.exists(manifest):
        with FileSystems.open(manifest) as handle:
            recorded: Any = json.loads(handle.read().decode("utf-8"))
        names = {str(name) for name in recorded.get("entries", []) if "/" not in str(name)}
    names.update(RUN_ENTRIES)
    return sorted(name for name in names if FileSystems.exists(FileSystems.join(output, name)))


def _stale_staging(output: str) -> list[str]:
    return [name for name in _children(output) if name.startswith(_STAGING_PREFIX)]


def _children(folder: str) -> list[str]:
    """Names directly inside ``folder`` (files and folders), on any file system."""
    if _is_local(folder):
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    found = FileSystems.match([FileSystems.join(folder, "**")])[0].metadata_list
    prefix = folder.rstrip("/") + "/"
    return sorted({m.path[len(prefix) :].split("/", 1)[0] for m in found if m.path.startswith(prefix)})


def _delete(output: str, names: list[str]) -> None:
    paths = [FileSystems.join(output, name) for name in names]
    paths = [path for path in paths if FileSystems.exists(path)]
    if paths:
        FileSystems.delete(paths)


def _write_json(path: str, data: dict[str, Any]) -> None:
    with FileSystems.create(path) as handle:
        handle.write(json.dumps(data, indent=2).encode("utf-8"))


def _is_local(path: str) -> bool:
    return "://" not in path


def _unwritable(output: str, exc: Exception) -> OutputError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return OutputError(f"cannot write to output directory {output!r}: {reason}; check the path and its permissions.")


def _refuse_local_file(output: str) -> None:
    """A local --output, or the nearest existing folder above it, must not be a regular file."""
    if not _is_local(output):
        return
    path = os.path.abspath(output)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if os.path.exists(path) and not os.path.isdir(path):
        where = "it is a file" if path == os.path.abspath(output) else f"{path!r} is a file"
        raise OutputError(
            f"cannot use {output!r} as the output directory: {where}, not a directory; choose another --output."
        )
