"""EvalOptions: the evaluator's own command-line flags, as a Beam PipelineOptions view."""

from __future__ import annotations

import argparse
import math
import os

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

__all__ = ["SWITCH", "EvalOptions", "progress_settings"]


def _switch(value: str) -> bool:
    """``true``/``false`` (any case, or 1/0, yes/no) for ``--flag=VALUE``."""
    text = value.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _seconds(value: str) -> float:
    """A finite, non-negative number of seconds (``nan``, ``inf`` and negatives would never print, or always)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(
            f"expected a finite number of seconds, 0 or more (0 turns progress off), got {value!r}"
        )
    return seconds


#: An on/off flag given bare (``--resume``) or with a value (``--resume=true``): a Dataflow Flex
#: Template passes every parameter as ``--name=value``, so a bare-only switch could not be set there.
SWITCH: dict[str, object] = {"nargs": "?", "const": True, "type": _switch, "metavar": "true|false"}


class EvalOptions(PipelineOptions):
    """``--config``, ``--output`` and friends; every other flag is Beam's."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:  # type: ignore[no-untyped-def]  # Beam's signature
        parser.add_argument("--config", help="evaluation config file (YAML or JSON)")
        parser.add_argument("--output", help="output directory (local path or Beam file-system URL)")
        parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N rows")
        parser.add_argument(
            "--overwrite",
            **SWITCH,
            default=False,
            help="replace outputs already in --output",
        )
        parser.add_argument(
            "--resume",
            **SWITCH,
            default=False,
            help="continue an interrupted (or completed) run in --output: recorded responses are not sent again",
        )
        parser.add_argument(
            "--cancel_batches",
            **SWITCH,
            default=False,
            help="with --overwrite: cancel the batches of the earlier run still live at the provider first",
        )
        parser.add_argument("--cache", default=None, help="response store shared by runs (directory or URL)")
        parser.add_argument(
            "--history",
            default=None,
            help="run history (directory or URL): a completed run appends its record to HISTORY/runs.jsonl",
        )
        parser.add_argument(
            "--policy",
            default=None,
            help="with targets or --decide: the gate policy (YAML or JSON) of OUT_DIR/comparison.json",
        )
        parser.add_argument(
            "--decide",
            **SWITCH,
            default=False,
            help="evaluate in seeded waves against --baseline and stop sending once the gate's verdict is certain "
            "(anytime-valid; exit code 0 GO, 1 NO-GO, 4 INCONCLUSIVE)",
        )
        parser.add_argument(
            "--baseline",
            default=None,
            help="with --decide: the baseline run's output directory, or latest/previous with --history",
        )
        parser.add_argument(
            "--no_cache",
            **SWITCH,
            default=False,
            help="use no response store, whatever the config says",
        )
        parser.add_argument(
            "--skip_preflight",
            **SWITCH,
            default=False,
            help="do not check the dataset, templates and endpoint before starting",
        )
        parser.add_argument(
            "--print_config_schema",
            action="store_true",
            default=False,
            help="print the config file's JSON Schema (for editors) and exit; with --markdown, docs/CONFIG.md",
        )
        parser.add_argument("--markdown", action="store_true", default=False, help=argparse.SUPPRESS)
        parser.add_argument(
            "--debug",
            action="store_true",
            default=False,
            help="show Python tracebacks and Beam's logs",
        )
        parser.add_argument(
            "--progress_interval",
            type=_seconds,
            default=10.0,
            help="seconds between progress lines on stderr (0 disables)",
        )


_LOCAL_RUNNERS = (None, "", "DirectRunner", "FnApiRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")


def progress_settings(options: PipelineOptions) -> tuple[float, int, bool]:
    """``(interval, worker processes, local)`` for a run: the ETA is shown on the local runner only.

    On the local runner the worker processes are known (``--direct_num_workers`` in
    ``multi_processing`` mode, else one); elsewhere each process reports rows and rate only.
    """
    interval = options.view_as(EvalOptions).progress_interval or 0.0
    local = options.view_as(StandardOptions).runner in _LOCAL_RUNNERS
    direct = options.view_as(DirectOptions)
    workers = 1
    if direct.direct_running_mode == "multi_processing":
        workers = direct.direct_num_workers or os.cpu_count() or 1  # 0 means one per CPU
    return float(interval), max(1, workers), local
