"""Provenance: where a run came from, for ``results.json`` (README "Comparing runs").

Two facts come from the data and are gathered by the pipeline as it runs, with no second
pass: the dataset's content fingerprint (folded from each split's hash as it is read) and the
``model`` / ``system_fingerprint`` values the endpoint returned, with counts. The graph
writes them to ``OUT_DIR/_provenance.json``; the driver adds the rest (times, hashes,
versions, runner) when it builds ``results.json``.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beameval.compare.identity import canonical_hash, eval_definition, models_seen, reply_models
from beameval.core.records import GeneratedRow
from pipeline.results import read_json
from transforms.read import DatasetFingerprintFn
from transforms.row_batches import rows_of

__all__ = ["PROVENANCE_FILE", "build_provenance", "collect_provenance", "utc_iso"]

PROVENANCE_FILE = "_provenance.json"
_PACKAGE = "beam-llm-evaluator"


def collect_provenance(
    fingerprints: beam.PCollection[tuple[int, int]], generated: beam.PCollection[GeneratedRow] | None, output: str
) -> None:
    """Add the steps that fingerprint the dataset and count the models seen, writing ``_provenance.json``.

    Args:
        fingerprints: ``ReadRows.fingerprints``, one (rows, hash) part per split read.
        generated: the rows after generation (their ``sample["response"]`` is the raw reply);
            None for an offline run, where no target replied (no per-row step then).
        output: the run's output directory.
    """
    fingerprint = fingerprints | "Fingerprint" >> beam.CombineGlobally(DatasetFingerprintFn())
    if generated is None:
        models = fingerprints.pipeline | "NoModels" >> beam.Create([[]])
    else:
        models = generated | "ModelsSeen" >> beam.CombineGlobally(_ModelCounts())
    path = FileSystems.join(output, PROVENANCE_FILE)
    _ = fingerprint | "WriteProvenance" >> beam.Map(_write, path, beam.pvalue.AsSingleton(models))


_Models = tuple[str | None, str | None]


class _ModelCounts(beam.CombineFn):
    """Rows or row batches (``transforms.row_batches``) -> ``[(models, count)]`` of the replies' models.

    One combine (counted where the rows are, merged once), not a count per key and then a
    list of the keys: a local runner runs each of those as stages of their own.
    """

    def create_accumulator(self) -> Counter[_Models]:
        return Counter()

    def add_input(self, counts: Counter[_Models], element: GeneratedRow | list[GeneratedRow]) -> Counter[_Models]:
        found = (reply_models(row.sample) if row.sample else None for row in rows_of(element))
        counts.update(models for models in found if models is not None)
        return counts

    def merge_accumulators(self, accumulators: Iterable[Counter[_Models]]) -> Counter[_Models]:
        merged: Counter[_Models] = Counter()
        for counts in accumulators:
            merged.update(counts)
        return merged

    def extract_output(self, counts: Counter[_Models]) -> list[tuple[_Models, int]]:
        return list(counts.items())


def _write(dataset: dict[str, Any], path: str, models: list[tuple[tuple[str | None, str | None], int]]) -> None:
    facts = {"dataset": dataset, "models_seen": models_seen(models)}
    with FileSystems.create(path) as handle:
        handle.write(json.dumps(facts).encode("utf-8"))


def utc_iso(timestamp: float) -> str:
    """``2024-05-01T12:00:00.123Z``: ISO 8601 in UTC, millisecond precision, sortable as text."""
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def build_provenance(
    config: dict[str, Any],
    paths: list[str],
    output: str,
    run_id: str,
    started: float,
    finished: float,
    runner: str,
) -> dict[str, Any]:
    """The ``provenance`` block of ``results.json``.

    Args:
        config: the resolved config (``EvalConfig.public_dump()``; holds no secrets).
        paths: the dataset files read.
        output: the run's output directory (where the pipeline wrote ``_provenance.json``).
        run_id: the run's id.
        started: when the pipeline started (epoch seconds).
        finished: when it finished.
        runner: the Beam runner's name.

    Returns:
        ``run_id``, ``started_at``, ``finished_at``, ``config_hash``, ``dataset`` (``paths``,
        ``rows``, ``fingerprint``), ``eval_hash``, ``package_version``, ``git_commit``,
        ``beam_version``, ``runner`` and ``models_seen``.
    """
    facts = read_json(FileSystems.join(output, PROVENANCE_FILE))
    dataset = facts["dataset"]
    return {
        "run_id": run_id,
        "started_at": utc_iso(started),
        "finished_at": utc_iso(finished),
        "config_hash": canonical_hash(config),
        "dataset": {"paths": paths, "rows": dataset["rows"], "fingerprint": dataset["fingerprint"]},
        "eval_hash": canonical_hash(eval_definition(config, dataset["fingerprint"])),
        "package_version": _package_version(),
        "git_commit": git_commit(Path(__file__).resolve().parents[1]),
        "beam_version": beam.__version__,
        "runner": runner,
        "models_seen": facts["models_seen"],
    }


def _package_version() -> str | None:
    try:
        return metadata.version(_PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def git_commit(root: Path) -> str | None:
    """The commit checked out at ``root`` when it is a git checkout, read from ``.git`` (no git process).

    Args:
        root: the project directory.

    Returns:
        The 40-hex commit, or None (an installed package, a detached copy, an unreadable ref).
    """
    git = root / ".git"
    try:
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            git = (root / git.read_text(encoding="utf-8").split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.split(":", 1)[1].strip()
        for directory in (git, _common_dir(git)):
            loose = directory / ref
            if loose.is_file():
                return loose.read_text(encoding="utf-8").strip() or None
            packed = directory / "packed-refs"
            if packed.is_file():
                for line in packed.read_text(encoding="utf-8").splitlines():
                    if line.endswith(f" {ref}") and not line.startswith(("#", "^")):
                        return line.split(" ", 1)[0]
    except (OSError, IndexError):
        return None
    return None


def _common_dir(git: Path) -> Path:
    """A worktree's shared git directory (where its branches live), else ``git`` itself."""
    common = git / "commondir"
    if common.is_file():
        return (git / common.read_text(encoding="utf-8").strip()).resolve()
    return git
