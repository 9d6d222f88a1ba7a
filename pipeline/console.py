"""``beameval``: the installed console command in front of the ``python -m pipeline.*`` entry points.

``beameval run ...`` is ``python -m pipeline.run ...`` with the same flags, and so for
``compare``, ``cache``, ``history`` and ``report``. It exists because ``python -m`` puts
the working directory first on ``sys.path``, so a user's own ``pipeline.py`` (or
``transforms.py``) there hides the installed package; a console script starts with its own
``bin`` directory on the path instead, and imports the installed evaluator wherever it is run.
The worker processes Beam starts (``--direct_running_mode=multi_processing``) are
``python -m`` commands in the same working directory, so the command also sets
``PYTHONSAFEPATH`` for them (Python 3.11+; unless already set), which keeps the working
directory off their path too.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from beameval.core.suggest import closest

__all__ = ["COMMANDS", "main"]

# Sub-command -> (module whose main(argv) it runs, what it does).
COMMANDS = {
    "run": ("pipeline.run", "evaluate a config: --config EVAL.yaml --output OUT_DIR [...]"),
    "compare": ("pipeline.compare", "compare a candidate run with a baseline and gate it (exit 0 GO, 1 NO-GO, 4)"),
    "cache": ("pipeline.cache", "inspect and maintain a response store: stats | prune | compact"),
    "history": ("pipeline.history", "list the runs recorded with --history DIR"),
    "report": ("pipeline.report", "write report.html again for a run or comparison directory"),
    "judge-labels": ("pipeline.judge_labels", "sample a run's rows by judge score into a file for people to label"),
}


def usage() -> str:
    """The command list `beameval` and `beameval --help` print."""
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_module, what) in COMMANDS.items()]
    return (
        "usage: beameval COMMAND [flags]\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\n'beameval COMMAND --help' lists a command's flags; 'beameval run' is 'python -m pipeline.run'."
    )


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the sub-command's own ``main``; returns its exit code (2 for an unknown command)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    os.environ.setdefault("PYTHONSAFEPATH", "1")  # inherited by Beam's worker processes, see above
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        meant = closest(name, COMMANDS)
        hint = f"; did you mean {meant!r}?" if meant else "."
        print(f"error: unknown command {name!r}{hint} The commands are: {', '.join(COMMANDS)}.", file=sys.stderr)
        return 2
    command: Callable[[list[str]], int] = importlib.import_module(COMMANDS[name][0]).main
    return command(rest)


if __name__ == "__main__":
    sys.exit(main())
