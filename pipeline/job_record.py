"""``OUT_DIR/_responses/_job.json``: the config a job was started with, checked by every ``--resume``.

Written once, when a job starts (a fresh run, or an ``--overwrite``), inside the journal
folder because it belongs to the journal: ``--overwrite`` removes both, ``--resume`` keeps
both. A resume whose config differs in what is sent or scored is refused before anything
is sent (``beameval.outputs.config_diff``). A journal without the record (written by an
older release, or by a run killed before it wrote it) is accepted and the record written.
"""

from __future__ import annotations

import json
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beameval.cache.journal import JOURNAL_DIR
from beameval.config.schema import EvalConfig
from beameval.core.errors import ConfigError
from beameval.outputs.config_diff import changed_paths, resumable_view
from pipeline.results import write_json_atomically

__all__ = ["JOB_FILE", "check_resumed_config", "record_job"]

JOB_FILE = "_job.json"
_SHOWN = 5


def _path(output: str) -> str:
    return FileSystems.join(output, JOURNAL_DIR, JOB_FILE)


def check_resumed_config(output: str, config: EvalConfig) -> None:
    """Refuse a ``--resume`` of ``output`` with a config that changes what is sent or scored.

    Raises:
        ConfigError: naming the changed entries and what to do instead.
    """
    path = _path(output)
    if not FileSystems.exists(path):
        return
    with FileSystems.open(path) as handle:
        started: dict[str, Any] = json.loads(handle.read())
    changed = changed_paths(started.get("config"), resumable_view(config.public_dump()))
    if changed:
        listed = ", ".join(changed[:_SHOWN]) + (f" and {len(changed) - _SHOWN} more" if len(changed) > _SHOWN else "")
        raise ConfigError(
            f"--resume of {output!r} with a different config: {listed} changed since the job was started. Its "
            "journal answers the requests of the first config, so resuming would pay again for changed requests or "
            "mix two evaluations in one output. Write to a new --output, or pass --overwrite to start over there "
            "(only params.budget, statistics, cache and decide may change on --resume)."
        )


def record_job(output: str, config: EvalConfig, resume: bool) -> None:
    """Record the config the job in ``output`` runs with: at a fresh start (replacing any), or a resume without one."""
    path = _path(output)
    if resume and FileSystems.exists(path):
        return
    journal = FileSystems.join(output, JOURNAL_DIR)
    if "://" not in output and not FileSystems.exists(journal):  # object stores have no folders
        FileSystems.mkdirs(journal)
    write_json_atomically(path, {"config": resumable_view(config.public_dump())})
