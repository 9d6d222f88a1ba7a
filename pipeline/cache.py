"""``python -m pipeline.cache stats|prune|compact PATH``, and the run's use of the store and journal.

``stats`` counts a store's shards, entries, distinct keys and models; ``prune
--older-than DAYS`` drops entries recorded more than DAYS ago; ``compact`` rewrites the
store as one shard per key bucket with one entry per key. PATH is the store's directory
(``cache.path``), local or a Beam file-system URL. ``stats --journal OUT_DIR`` counts a
run's own journal (``OUT_DIR/_responses``) the same way; a journal is only inspected,
never pruned or compacted (it is what ``--resume`` answers from, and the run may be live).
Both maintenance commands are safe while runs read and write the store: they write
their new shards before deleting the old ones, and a run that finds a shard gone reads
the ones that replaced it.
"""

from __future__ import annotations

import argparse
import json
import sys

from beameval.cache import store
from beameval.cache.journal import JOURNAL_DIR
from beameval.config.cache import StoreUse, store_use
from beameval.config.schema import EvalConfig
from beameval.core.durable import disk_full
from pipeline.options import EvalOptions
from transforms.cache import files_for
from transforms.metric_calls import needs_metric_calls

__all__ = ["lookup_shards", "main", "publish_run", "run_store_use"]

_DAY_S = 86_400.0


def run_store_use(config: EvalConfig, flags: EvalOptions) -> StoreUse:
    """The run's use of the shared store, from ``cache:``, ``--cache`` and ``--no_cache``."""
    return store_use(config.cache, flags.cache, bool(flags.no_cache))


def lookup_shards(config: EvalConfig, output: str, use: StoreUse, resume: bool) -> list[str] | None:
    """The shards whose responses answer this run's requests, listed now; None when nothing is looked up.

    Args:
        config: the run's config (an offline run without endpoint metrics sends nothing).
        output: the output directory (its journal counts with ``--resume``).
        use: the run's use of the store.
        resume: ``--resume`` was given.

    Returns:
        The store's shards (when readable) and the journal's (with ``--resume``: a fresh
        run never reads an older journal); None when there are none, and the run sends
        every request without a join. Listed before the preflight's answer is journalled
        (``pipeline.first_answer.hand_off``): that row is answered from the answer itself.

    """
    if config.target is None and not needs_metric_calls(config.metrics):
        return None
    found: list[str] = []
    if resume:
        journal = _journal_dir(output)
        found += store.shards(files_for(journal), journal)
    if use.read and use.path is not None:
        entries = f"{use.path}/{store.ENTRIES_DIR}"
        found += store.shards(files_for(entries), entries)
    return found or None  # nothing recorded yet: no join to run


def publish_run(output: str, use: StoreUse) -> list[str]:
    """Add the run's journal to the store when the run may write to it; returns the warnings (none or one).

    A store that cannot be written (a full disk, a read-only folder or bucket) does not
    fail the run: its outputs do not depend on the store, and its responses stay in the
    journal, where a ``--resume`` of the run copies them from once the store is writable.
    """
    if not use.write or use.path is None:
        return []
    journal = _journal_dir(output)
    try:
        store.publish(files_for(journal), journal, files_for(use.path), use.path)
    except Exception as exc:  # noqa: BLE001 - every file system fails its own way; none of them fails the run
        return [
            f"the response store {use.path!r} cannot be written ({_cause(exc)}), so this run's responses were "
            f"not added to it; they are kept in {journal}/, and a --resume of this run adds them once the "
            "store can be written."
        ]
    return []


def _cause(exc: Exception) -> str:
    """``No space left on device: 'PATH'`` for an OSError, else the exception's first line."""
    failed = disk_full(exc) or exc
    if isinstance(failed, OSError) and failed.strerror:
        return f"{failed.strerror}: {failed.filename!r}" if failed.filename else failed.strerror
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _journal_dir(output: str) -> str:
    return f"{output.rstrip('/')}/{JOURNAL_DIR}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline.cache", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    stats = commands.add_parser("stats", help="count shards, entries, distinct keys and models")
    prune = commands.add_parser("prune", help="drop entries recorded more than --older-than DAYS ago")
    prune.add_argument("--older-than", dest="older_than", type=float, required=True, metavar="DAYS")
    compact = commands.add_parser("compact", help="one shard per key bucket, one entry per key")
    for command in (stats, prune, compact):
        command.add_argument("path", metavar="PATH", help="the store's directory (cache.path), local or a URL")
    stats.add_argument(
        "--journal", action="store_true", help="PATH is a run's OUT_DIR: count its journal (OUT_DIR/_responses)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code (2 for a usage error)."""
    args = _parser().parse_args(argv)
    path = args.path.rstrip("/")
    files = files_for(path)
    if getattr(args, "journal", False):
        return _journal_stats(path)
    entries = f"{path}/{store.ENTRIES_DIR}"
    if not _holds_shards(files, entries, path, "response store", "pass the directory given as cache.path or --cache."):
        return 2
    if args.command == "stats":
        print(json.dumps(store.stats(files, path).as_dict(), indent=2))
    elif args.command == "prune":
        if args.older_than < 0:
            print(f"error: --older-than must be at least 0 days, got {args.older_than:g}.", file=sys.stderr)
            return 2
        kept, dropped = store.prune(files, path, args.older_than * _DAY_S)
        print(json.dumps({"kept": kept, "dropped": dropped}))
    else:
        shards, before, after = store.compact(files, path)
        print(json.dumps({"shards_before": shards, "entries_before": before, "entries_after": after}))
    return 0


def _journal_stats(output: str) -> int:
    """``stats --journal OUT_DIR``: the journal's counts (OUT_DIR/_responses itself is accepted too)."""
    journal = output if output.endswith(f"/{JOURNAL_DIR}") or output == JOURNAL_DIR else _journal_dir(output)
    files = files_for(journal)
    if not _holds_shards(files, journal, output, "response journal", "pass the --output of a run that sent requests."):
        return 2
    print(json.dumps(store.folder_stats(files, journal).as_dict(), indent=2))
    return 0


def _holds_shards(files: store.Files, directory: str, given: str, what: str, hint: str) -> bool:
    """Whether ``directory`` holds any shard; if not, say on stderr that ``given`` is no ``what`` and what to pass."""
    if store.shards(files, directory):
        return True
    print(f"error: {given!r} holds no {what} ({directory}/*.jsonl matches nothing); {hint}", file=sys.stderr)
    return False


if __name__ == "__main__":
    sys.exit(main())
