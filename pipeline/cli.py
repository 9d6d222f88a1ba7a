"""The command line's strictness: every flag is the evaluator's or a registered Beam option, or it is an error.

Beam keeps flags it does not know and only logs a warning (which the CLI hides), so a typo
such as ``--limt 5`` used to evaluate every row. Here the flags are parsed against the union
of the evaluator's options and every ``PipelineOptions`` subclass Beam has registered, and
anything left over stops the run before it starts, naming the closest known flag.
"""

from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

from beameval.core.errors import EvaluatorError
from beameval.core.suggest import closest
from pipeline.options import EvalOptions

__all__ = ["UsageError", "check_flags", "help_text"]

BEAM_OPTIONS_DOC = "https://beam.apache.org/releases/pydoc/current/apache_beam.options.pipeline_options.html"


class UsageError(EvaluatorError):
    """A flag that nothing knows, or a stray argument."""


def _all_options_parser() -> argparse.ArgumentParser:
    parser = _BeamArgumentParser(allow_abbrev=False, add_help=False, exit_on_error=False)
    seen: dict[str, type[PipelineOptions]] = {}
    pending = list(PipelineOptions.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        seen.setdefault(f"{cls.__module__}.{cls.__qualname__}", cls)
    for cls in seen.values():
        try:
            cls._add_argparse_args(parser)
        except argparse.ArgumentError:  # two classes registering one flag: the first is enough
            continue
    return parser


def check_flags(argv: list[str]) -> None:
    """Refuse flags that neither the evaluator nor Beam knows.

    Raises:
        UsageError: naming the first unknown flag and, when one is close, the flag meant.
    """
    parser = _all_options_parser()
    try:
        _, unknown = parser.parse_known_args(argv)
    except argparse.ArgumentError as exc:  # a known flag with a value of the wrong kind (--limit=abc)
        raise UsageError(f"{exc}; see python -m pipeline.run --help.") from None
    if not unknown:
        return
    known = sorted(option for option in parser._option_string_actions if option.startswith("--"))
    flag = next((arg for arg in unknown if arg.startswith("-")), None)
    if flag is None:
        raise UsageError(
            f"unexpected argument {unknown[0]!r}: every argument is a --flag (or the value of one); "
            "see python -m pipeline.run --help."
        )
    name = flag.split("=", 1)[0]
    close = closest(name, known)
    meant = f"; did you mean {close}?" if close else "."
    raise UsageError(
        f"unknown flag {name!r}{meant} Nothing was run. The evaluator's flags are listed by "
        f"python -m pipeline.run --help; Beam's options are documented at {BEAM_OPTIONS_DOC}"
    )


def help_text() -> str:
    """``--help``: the usage line, every evaluator flag, and where Beam's options are documented."""
    parser = _BeamArgumentParser(
        prog="python -m pipeline.run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="python -m pipeline.run --config EVAL.yaml --output OUT_DIR [--limit N] [flags] [Beam options]",
        description="Evaluate a model (or a dataset's own outputs) with the metrics of EVAL.yaml, on Apache Beam.",
        epilog=(
            "Every other flag is an Apache Beam pipeline option and is passed to Beam untouched\n"
            "(--runner, --direct_running_mode, --direct_num_workers, --project, --region, --temp_location, ...).\n"
            f"Beam's options are documented at\n  {BEAM_OPTIONS_DOC}\n"
            "An unknown flag is an error (exit 2).\n\n"
            "Exit codes: 0 completed, 1 the run failed, 2 a usage, config or input error, 3 an internal error,\n"
            "130 interrupted (Ctrl-C or SIGTERM)."
        ),
    )
    EvalOptions._add_argparse_args(parser)
    return parser.format_help()
