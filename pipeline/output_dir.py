"""The output directory: one run at a time, its outputs replaced whole, and nothing else touched.

A run holds OUT_DIR's lock (``beameval.outputs.lock``) from before it touches anything
until it ends, so a second run on the same directory is refused instead of deleting the
first one's outputs. It writes ``rows/``, ``errors/`` and its summary into a staging
folder inside OUT_DIR (``_staging-<run id>/``) and moves them into place only when the
pipeline has finished, so a reader of ``rows/`` never sees half of one run and half of
another, and a crashed run leaves the previous outputs as they were. Publishing removes
nothing before the new outputs are in: each entry is swapped with its new version in one
step (``core.durable.exchange``; elsewhere the old one is renamed aside first), the old
versions wait in the staging folder, and only then is that folder deleted. The manifest
(``_manifest.json``) lists what the run wrote; ``--overwrite`` removes exactly those
entries (or, for outputs from before the manifest, the fixed names of README "Outputs"),
never a path outside OUT_DIR, and leaves any other file or folder alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems

from beameval.config.schema import EvalConfig
from beameval.core.crash_points import crash_point
from beameval.core.durable import disk_full, exchange, fsync_directory
from beameval.core.errors import OutputError
from beameval.outputs.groups import GROUPS_FILE
from beameval.outputs.lock import LOCK_FILE, OutputLock, acquire, refuse_symlink
from pipeline.out_files import children, delete, exists, is_local, move, write_json
from transforms.batch_endpoint import live_batches
from transforms.cache import files_for

__all__ = [
    "JOURNAL_ENTRY",
    "MANIFEST_FILE",
    "full_disk_message",
    "lock_output",
    "prepare_output",
    "publish_outputs",
    "refuse_dataset_overlap",
    "refuse_earlier_outputs",
    "refuse_live_batches",
    "release_output",
    "staging_dir",
]

MANIFEST_FILE = "_manifest.json"
#: The response journal (``beameval.cache.journal.JOURNAL_DIR``): what ``--resume`` keeps.
JOURNAL_ENTRY = "_responses"
#: What a run of this program writes into OUT_DIR; a run before manifests existed wrote these.
RUN_ENTRIES = (
    "results.json",
    "_summary.json",
    "_provenance.json",
    "report.html",
    GROUPS_FILE,
    "rows",
    "errors",
    JOURNAL_ENTRY,
    MANIFEST_FILE,
)
_STAGING_PREFIX = "_staging-"
_PROBE = ".write-probe"
#: Inside the staging folder: the earlier run's entries, kept until the new ones are all in place.
_REPLACED = "_replaced"
#: Paths a run writes inside OUT_DIR, one of each kind, for telling whether a dataset glob reaches them.
_WRITTEN = (
    "rows/rows-00000-of-00001.parquet",
    "errors/errors-00000-of-00001.jsonl",
    f"{JOURNAL_ENTRY}/20260101T000000-1-0a1b2c3d-00001.jsonl",
    f"{_STAGING_PREFIX}0/rows/rows-00000-of-00001.parquet",
    f"{_STAGING_PREFIX}0/errors/errors-00000-of-00001.jsonl",
    *RUN_ENTRIES[:4],
    MANIFEST_FILE,
    LOCK_FILE,
)
#: The output directories this process holds, with their locks (released by ``release_output``).
_HELD: list[tuple[str, OutputLock, bool]] = []
#: How a full disk or quota reads in a message that crossed a process boundary as text.
_FULL_TEXT = re.compile(r"(No space left on device|Disk quota exceeded)(?:: '([^'\n]+)')?")


def lock_output(output: str, run_id: str) -> OutputLock:
    """Take OUT_DIR's lock for this run (creating OUT_DIR if needed) before anything in it is touched.

    Returns:
        The lock. Taking over a dead run's lock is said on stderr.

    Raises:
        OutputError: another live run holds it (the message names host, pid and start time),
            or the directory cannot be created.
    """
    _refuse_local_file(output)
    created = is_local(output) and not os.path.exists(output)
    with _unwritable_as_output_error(output):
        lock = acquire(output, run_id, files_for(output) if not is_local(output) else None)
    _HELD.append((output, lock, created))
    if lock.took_over is not None:
        print(
            f"warning: took over the lock of {output!r} left by a run that is no longer running "
            f"({lock.took_over.describe()}).",
            file=sys.stderr,
        )
    return lock


def release_output() -> None:
    """Release every lock ``lock_output`` took in this process (the end of a run, however it ends).

    A directory the lock created and the run left empty (a preflight that failed, a refusal)
    is removed too: a run that wrote nothing leaves nothing behind.
    """
    while _HELD:
        output, lock, created = _HELD.pop()
        lock.release()
        if created:
            with contextlib.suppress(OSError):  # not empty (or gone): it holds what the run wrote
                os.rmdir(output)


def full_disk_message(exc: BaseException) -> str | None:
    """The one paragraph for a run stopped by a full disk (or quota), or None when ``exc`` is something else.

    Found in the cause chain when the error was raised in this process, or in the text of
    one a worker process sent back.
    """
    found = disk_full(exc)
    text = str(exc)
    match = _FULL_TEXT.search(text)
    if found is None and match is None:
        return None
    cause = found.strerror if found is not None and found.strerror else match.group(1) if match else "disk full"
    path = (found.filename if found is not None else None) or (match.group(2) if match else None)
    output = _HELD[-1][0] if _HELD else None
    where = f"writing {str(path)!r}" if path else f"writing under {output!r}"
    kept = (
        f"The earlier outputs in {output!r} and the responses already recorded in its {JOURNAL_ENTRY}/ are kept"
        if output
        else "What was already written is kept"
    )
    return (
        f"the run stopped because the disk is full: {cause} ({where}). {kept}. "
        "Free space (or choose an --output on another disk), then run the same command with --resume."
    )


def refuse_dataset_overlap(output: str, pattern: str, paths: list[str]) -> None:
    """Refuse an OUT_DIR that the dataset's path or glob reaches: the run would read its own outputs as data.

    Checked on the pattern, against the paths a run writes (so a first run, whose OUT_DIR
    is still empty, is refused as well as the second, which would read the first's
    ``rows/``), and on the files the pattern matched now.

    Raises:
        OutputError: the dataset reaches into OUT_DIR's outputs.
    """
    root = _absolute(output).rstrip("/")
    matches = re.compile(FileSystem.translate_pattern(_absolute(pattern))).match
    reached = [f"{root}/{name}" for name in _WRITTEN if matches(f"{root}/{name}")]
    reached += [path for path in paths if _run_entry_of(root, _absolute(path))]
    if reached:
        raise OutputError(
            f"the dataset path {pattern!r} reaches into the output directory {output!r} (it matches "
            f"{reached[0]!r}), so the run would read its own outputs back as data; choose an --output "
            "outside the dataset's folders, or narrow dataset.path."
        )


def _run_entry_of(root: str, path: str) -> bool:
    """True when ``path`` lies in one of a run's entries inside ``root`` (rows/, the journal, staging, ...)."""
    if not path.startswith(root + "/"):
        return False
    first = path[len(root) + 1 :].split("/", 1)[0]
    return first in RUN_ENTRIES or first.startswith(_STAGING_PREFIX) or first == LOCK_FILE


def _absolute(path: str) -> str:
    return path if not is_local(path) else os.path.abspath(path)


def staging_dir(output: str, run_id: str) -> str:
    """Where a run's pipeline writes its outputs before they are moved into place."""
    return FileSystems.join(output, f"{_STAGING_PREFIX}{run_id}")


def refuse_earlier_outputs(output: str, overwrite: bool, resume: bool) -> list[str]:
    """Refuse an ``output`` holding outputs when neither ``overwrite`` nor ``resume`` is set; changes nothing.

    Checked before the preflight too, so its paid request is not spent on a run that
    ``prepare_output`` would then refuse.

    Returns:
        The earlier run's entries in ``output``.

    Raises:
        OutputError: it holds outputs and neither flag is set, or it is a file.
    """
    _refuse_local_file(output)
    with _unwritable_as_output_error(output):
        existing = _earlier_entries(output)
    if existing and not overwrite and not resume:
        raise OutputError(
            f"output directory {output!r} already holds outputs ({', '.join(existing)}); "
            "pass --resume to continue that run without paying again for the responses it recorded, "
            "--overwrite to replace them, or choose another --output."
        )
    return existing


def refuse_live_batches(config: EvalConfig, output: str, overwrite: bool, resume: bool, cancel: bool) -> None:
    """``--overwrite`` would drop the record of batches the provider still runs: refuse, or cancel them first.

    With ``cancel`` (``--cancel_batches``) each live batch is cancelled at the provider
    before anything is deleted, and the overwrite goes on.

    Raises:
        OutputError: batches recorded in ``output`` are live at the provider and ``cancel`` is not set.
    """
    if not overwrite or resume:
        return
    live = live_batches(config, FileSystems.join(output, JOURNAL_ENTRY), cancel)
    if live and cancel:
        print(f"cancelled {len(live)} live batch(es) at the provider before overwriting: {', '.join(live)}")
    elif live:
        raise OutputError(
            f"output directory {output!r} holds batches that are still running at the provider: {', '.join(live)}. "
            "--overwrite would abandon them (they are billed when they finish). Rerun with --resume to collect "
            "them, or pass --cancel_batches with --overwrite to cancel them at the provider first."
        )


def prepare_output(output: str, overwrite: bool, resume: bool = False) -> None:
    """Make ``output`` ready for a new run; the earlier run's outputs stay until this one publishes.

    With ``resume`` the earlier run's response journal is kept (the new run answers from it);
    with ``overwrite`` it is removed now, since the new run starts recording at once.

    Raises:
        OutputError: it already holds outputs and neither ``overwrite`` nor ``resume`` is set, or it
            cannot be written.
    """
    with _unwritable_as_output_error(output):
        existing = refuse_earlier_outputs(output, overwrite, resume)
        if overwrite and not resume and JOURNAL_ENTRY in existing:
            delete(output, [JOURNAL_ENTRY])
        delete(output, _stale_staging(output))  # folders of runs that crashed before publishing
        if not FileSystems.exists(output):
            FileSystems.mkdirs(output)
        _probe_writable(output)


def _probe_writable(output: str) -> None:
    """Write and delete a small file, so an unwritable OUT_DIR fails now, before anything is paid.

    Locally the probe is created exclusively and without following links: a symbolic link
    planted at its name is refused by name, and nothing it points to is touched.
    """
    probe = FileSystems.join(output, _PROBE)
    if not is_local(output):
        with FileSystems.create(probe) as handle:
            handle.write(b"ok")
        FileSystems.delete([probe])
        return
    refuse_symlink(probe, "the write probe")
    with contextlib.suppress(FileNotFoundError):
        os.remove(probe)  # a run killed between writing and deleting it
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        os.write(fd, b"ok")
    finally:
        os.close(fd)
    os.remove(probe)


def publish_outputs(output: str, stage: str, run_id: str) -> None:
    """Replace the earlier run's outputs with the staged ones and record what this run wrote.

    The steps, each safe to be killed after (``BEAMEVAL_CRASH_AT`` names them for the tests):
    the manifest is written, listing this run's entries and the fixed names results.json
    and report.html will take, so the next ``--overwrite`` or ``--resume`` still cleans
    completely (``publish-manifest``); the earlier run's entries that this run does not
    replace, results.json first, move into the staging folder, since results.json must not
    describe rows that are no longer its run's (``publish-aside``); each staged entry
    takes its place, the old version moving into the staging folder
    (``publish-moved-rows`` after ``rows/``, and so on); only then is the staging folder, and with
    it the earlier run's outputs, deleted. A kill at any step loses no output: each is in
    OUT_DIR or in the staging folder, which the next run removes.
    """
    staged = sorted(children(stage))
    entries = sorted({*staged, "results.json", "report.html", GROUPS_FILE, JOURNAL_ENTRY, MANIFEST_FILE})
    earlier = [name for name in _earlier_entries(output) if name not in (JOURNAL_ENTRY, MANIFEST_FILE)]
    write_json(FileSystems.join(output, MANIFEST_FILE), {"run_id": run_id, "entries": entries})
    crash_point("publish-manifest")
    replaced = FileSystems.join(stage, _REPLACED)
    for name in sorted((n for n in earlier if n not in staged), key=lambda n: n != "results.json"):
        move(FileSystems.join(output, name), FileSystems.join(replaced, name))
    crash_point("publish-aside")
    for name in staged:
        source, target = FileSystems.join(stage, name), FileSystems.join(output, name)
        if not exists(target):
            move(source, target)
        elif not (is_local(output) and exchange(source, target)):  # swapped: the old one is now in staging
            move(target, FileSystems.join(replaced, name))
            move(source, target)
        crash_point(f"publish-moved-{name}")
    if is_local(output):
        fsync_directory(output)  # the new names survive a crash of the machine before anything is deleted
    delete(output, [os.path.basename(stage.rstrip("/"))])


def _earlier_entries(output: str) -> list[str]:
    """What an earlier run of this program left in ``output`` (from its manifest, else by the fixed names)."""
    manifest = FileSystems.join(output, MANIFEST_FILE)
    names: set[str] = set()
    if FileSystems.exists(manifest):
        with FileSystems.open(manifest) as handle:
            recorded: Any = json.loads(handle.read().decode("utf-8"))
        names = {str(name) for name in recorded.get("entries", []) if _plain_name(str(name))}
    names.update(RUN_ENTRIES)
    return sorted(name for name in names if exists(FileSystems.join(output, name)))


def _plain_name(name: str) -> bool:
    """A manifest entry that names something directly inside OUT_DIR (never ``..``, a path, or the lock)."""
    return (
        name not in ("", ".", "..", LOCK_FILE)
        and not any(sep in name for sep in ("/", "\\", "\0"))
        and os.path.basename(name) == name
    )


def _stale_staging(output: str) -> list[str]:
    return [name for name in children(output) if name.startswith(_STAGING_PREFIX)]


@contextlib.contextmanager
def _unwritable_as_output_error(output: str) -> Iterator[None]:
    """Turn a file system's own error into an OutputError naming ``output``; OutputError and a full disk pass."""
    try:
        yield
    except OutputError:
        raise
    except Exception as exc:  # noqa: BLE001 - every file system raises its own errors
        if disk_full(exc):
            raise
        raise _unwritable(output, exc) from None


def _unwritable(output: str, exc: Exception) -> OutputError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return OutputError(f"cannot write to output directory {output!r}: {reason}; check the path and its permissions.")


def _refuse_local_file(output: str) -> None:
    """A local --output, or the nearest existing folder above it, must not be a regular file."""
    if not is_local(output):
        return
    path = os.path.abspath(output)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if os.path.exists(path) and not os.path.isdir(path):
        where = "it is a file" if path == os.path.abspath(output) else f"{path!r} is a file"
        raise OutputError(
            f"cannot use {output!r} as the output directory: {where}, not a directory; choose another --output."
        )
