"""``--decide --baseline BASE``: the baseline run, a directory or the history's ``latest``/``previous``.

``pipeline.compare`` matches the history by the candidate's ``eval_hash``, which a finished
run reports; ``--decide`` needs its baseline before the first wave, so it computes the hash
its config would have on each dataset fingerprint the history holds
(``beameval.compare.identity.eval_definition``) and picks among the runs that match. The
first wave then checks the real ``eval_hash`` (``pipeline.decide``).
"""

from __future__ import annotations

import os

from beameval.compare.identity import canonical_hash, eval_definition
from beameval.compare.runs import BASELINE_CHOICES, baseline_run
from beameval.config.schema import EvalConfig
from beameval.core.errors import ConfigError, EvaluatorError
from pipeline.compare_runs import Run, load_run
from pipeline.history import load_history

__all__ = ["resolve_decide_baseline"]


def resolve_decide_baseline(baseline: str, history: str | None, config: EvalConfig, output: str) -> Run:
    """The completed baseline run ``--baseline`` names.

    Raises:
        ConfigError: ``latest``/``previous`` without ``--history``.
        EvaluatorError: the history has no such run, or the run did not complete (a decided
            run is refused until ``--resume`` completes it).
    """
    if baseline not in BASELINE_CHOICES:
        return _completed(load_run(baseline, "baseline"))
    if history is None:
        raise ConfigError(f"--baseline {baseline} needs --history DIR: the run history to pick the baseline from.")
    records = load_history(history)
    dump = config.public_dump()
    mine = os.path.abspath(output) if "://" not in output else output
    fingerprints = dict.fromkeys(r.get("dataset_fingerprint") for r in records if r.get("dataset_fingerprint"))
    for fingerprint in fingerprints:
        eval_hash = canonical_hash(eval_definition(dump, str(fingerprint)))
        chosen = baseline_run(records, baseline, eval_hash, None, mine)
        if chosen is not None:
            return _completed(load_run(str(chosen["output"]), "baseline"))
    raise EvaluatorError(
        f"no baseline: the history {history!r} holds no{' accepted' if baseline == 'latest' else ''} completed run "
        "of this evaluation (same dataset, prompt, metrics), so there is nothing to decide against. Run it once "
        "without --decide (with --history) to make the first baseline."
    )


def _completed(run: Run) -> Run:
    """A run stopped early (by a budget or a decision) has no complete rows to pair with: refused."""
    if run.stopped is not None:
        raise EvaluatorError(
            f"the baseline {run.directory!r} stopped early ({run.stopped}): --decide needs a completed baseline. "
            "Complete it with --resume, or pass another."
        )
    return run
