"""The config a job was started with, kept beside its id in ``OUT_DIR/_responses/job.json``, checked on ``--resume``.

A ``--resume`` answers from the journal what was already paid for and sends the rest; if
the dataset, a target, the prompt, the params or a metric changed meanwhile, the journal
answers other requests: the run would pay again for every changed row, or mix two
evaluations in one OUT_DIR. So the config (without what may change: ``RESUMABLE_CHANGES``)
is recorded when the job starts, and a resume whose config differs is refused before
anything is sent (``beameval.outputs.config_diff``). A journal without it (an older
release's, or a run killed before it wrote one) is accepted, and the config recorded then.
"""

from __future__ import annotations

import json
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beameval.cache.journal import JOURNAL_DIR
from beameval.config.schema import EvalConfig
from beameval.core.errors import ConfigError
from beameval.outputs.config_diff import changed_paths, resumable_view
from pipeline.job import JOB_FILE
from pipeline.results import write_json_atomically

__all__ = ["check_resumed_config", "record_job_config"]

_SHOWN = 5


def _path(output: str) -> str:
    return FileSystems.join(output, JOURNAL_DIR, JOB_FILE)


def _read(path: str) -> dict[str, Any]:
    if not FileSystems.exists(path):
        return {}
    try:
        with FileSystems.open(path) as handle:
            data = json.loads(handle.read())
    except ValueError:  # torn by a crash: as if there were none
        return {}
    return data if isinstance(data, dict) else {}


def check_resumed_config(output: str, config: EvalConfig) -> None:
    """Refuse a ``--resume`` of ``output`` with a config that changes what is sent or scored.

    Raises:
        ConfigError: naming the changed entries and what to do instead.
    """
    started = _read(_path(output)).get("config")
    if started is None:
        return
    changed = changed_paths(started, resumable_view(config.public_dump()))
    if changed:
        listed = ", ".join(changed[:_SHOWN]) + (f" and {len(changed) - _SHOWN} more" if len(changed) > _SHOWN else "")
        raise ConfigError(
            f"--resume of {output!r} with a different config: {listed} changed since the job was started. Its "
            "journal answers the requests of the first config, so resuming would pay again for changed requests or "
            "mix two evaluations in one output. Write to a new --output, or pass --overwrite to start over there "
            "(only params.budget, statistics, cache and decide may change on --resume)."
        )


def record_job_config(output: str, config: EvalConfig, resume: bool) -> None:
    """Record the config of the job in ``output``: at a fresh start, or on a resume of a job that has none yet."""
    path = _path(output)
    record = _read(path)
    if resume and "config" in record:
        return
    write_json_atomically(path, {**record, "config": resumable_view(config.public_dump())})
