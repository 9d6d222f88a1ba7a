"""results.json: built from the run summary, written last and atomically."""

from __future__ import annotations

import json
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beameval.core.durable import write_atomically
from beameval.core.redaction import redact_urls
from beameval.core.scoring import RowScorer
from beameval.judges.calibration import judge_results
from beameval.metrics.judge.pairwise import pairwise_results
from beameval.stats.corpus import corpus_result
from beameval.stats.ranges import clip_to_range
from beameval.stats.rubric import rubric_result
from beameval.stats.summary import ScoreAccumulator
from beameval.stats.summary import result as score_result

__all__ = ["RESULTS_FILE", "build_results", "read_json", "write_file_atomically", "write_json_atomically"]

RESULTS_FILE = "results.json"


def build_results(
    summary: dict[str, Any],
    scorer: RowScorer,
    config_dump: dict[str, Any],
    run_info: dict[str, Any],
) -> dict[str, Any]:
    """The results document (``results.json``): status, counts, aggregate scores, groups, usage, config."""
    level = config_dump.get("statistics", {}).get("confidence_level", 0.95)
    repeats = config_dump.get("params", {}).get("repeats", 1)
    groups = [
        {
            "by": group["by"],
            "value": group["value"],
            "counts": _counts(group["counts"], repeats),
            "scores": _scores(group, scorer, level),
        }
        for group in summary.get("groups", [])
    ]
    agreement, _ = judge_results(scorer.metrics, summary.get("corpus", {}), level)
    pairwise = pairwise_results(scorer.metrics, summary)  # win/tie/loss and position_flip_rate per pairwise judge
    return {
        "status": "completed",
        "counts": _counts(summary["counts"], repeats),
        "aggregate_scores": {"scores": _scores(summary, scorer, level)},
        **({"judge_agreement": agreement} if agreement else {}),
        **({"pairwise": pairwise} if pairwise else {}),
        **({"groups": groups} if config_dump.get("statistics", {}).get("group_by") else {}),
        "usage": summary["usage"],
        "run": run_info,
        "config": redact_urls(config_dump),  # defence in depth: the config refuses URLs with credentials
    }


def _counts(counts: dict[str, int], repeats: int) -> dict[str, int]:
    """rows, ok and errors, and with repeats samples: the summary counts samples, K per row."""
    if repeats == 1:
        return counts
    return {**counts, "rows": counts["rows"] // repeats, "samples": counts["rows"]}


def _scores(summary: dict[str, Any], scorer: RowScorer, level: float) -> list[dict[str, Any]]:
    """The aggregate scores of the run or of one group: per-row scores (rubric-shaped where so), then corpus ones."""
    rubrics = {
        f"{key}.{name}": levels
        for key, metric in scorer.metrics
        for name, levels in metric.rubric_definitions().items()
    }
    _, ppis = judge_results(scorer.metrics, summary.get("corpus", {}), level)
    scores = []
    for name in scorer.score_names:
        # An empty dataset still reports every score, with null statistics.
        result = summary["scores"].get(name) or score_result(ScoreAccumulator(), name, level)
        if name in rubrics:
            result = rubric_result(result, summary["labels"].get(f"{name}.label", {}), rubrics[name])
        if name in ppis:  # a calibrated judge's score: the prediction-powered mean of the human score
            result = {**result, "ppi": ppis[name]}
        scores.append(clip_to_range(result, scorer.score_ranges.get(name)))
    for key, metric in scorer.metrics:
        names = metric.corpus_output_names()
        if not names:
            continue
        totals = summary["corpus"].get(key)
        ranges = metric.output_ranges()
        values = metric.corpus_score(totals) if totals else {}
        scores.extend(
            clip_to_range(corpus_result(f"{key}.{name}", values.get(name, float("nan")), level), ranges.get(name))
            for name in names
        )
    return scores


def read_json(path: str) -> Any:
    """Read a JSON file from any Beam file system."""
    with FileSystems.open(path) as handle:
        return json.loads(handle.read().decode("utf-8"))


def write_json_atomically(path: str, data: Any) -> None:
    """Write JSON so that a reader never sees a partial file, and a crash of the machine no torn one.

    Local files are written under a temporary name, fsynced, renamed into place and their
    directory fsynced (``core.durable.write_atomically``); object stores make a finished
    upload visible atomically, so a plain create is enough there.
    """
    write_file_atomically(path, json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8"))


def write_file_atomically(path: str, payload: bytes, mime_type: str = "application/octet-stream") -> None:
    """Write ``payload`` whole or not at all: ``core.durable.write_atomically`` locally, one upload elsewhere.

    ``mime_type`` is what an object store serves the file as (a report is ``text/html``).
    """
    if "://" in path:
        with FileSystems.create(path, mime_type=mime_type) as handle:
            handle.write(payload)
        return
    write_atomically(path, payload)
