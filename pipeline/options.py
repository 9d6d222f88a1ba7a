"""EvalOptions: the evaluator's own command-line flags, as a Beam PipelineOptions view."""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

__all__ = ["EvalOptions"]


class EvalOptions(PipelineOptions):
    """``--config``, ``--output`` and friends; every other flag is Beam's (CONTRACT.md)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:  # type: ignore[no-untyped-def]  # Beam's signature
        parser.add_argument("--config", help="evaluation config file (YAML or JSON)")
        parser.add_argument("--output", help="output directory (local path or Beam file-system URL)")
        parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N rows")
        parser.add_argument(
            "--overwrite",
            action="store_true",
            default=False,
            help="replace outputs already in --output",
        )
        parser.add_argument(
            "--skip_preflight",
            action="store_true",
            default=False,
            help="do not check the dataset, templates and endpoint before starting",
        )
        parser.add_argument(
            "--debug",
            action="store_true",
            default=False,
            help="show Python tracebacks and Beam's logs",
        )
        parser.add_argument(
            "--progress_interval",
            type=float,
            default=10.0,
            help="seconds between progress lines on stderr (0 disables)",
        )
