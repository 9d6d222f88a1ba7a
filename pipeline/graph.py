"""The evaluation graph: read -> generate (or pass through) -> score -> write + summarise."""

from __future__ import annotations

import apache_beam as beam

from beameval.config import EvalConfig
from beameval.core.scoring import RowScorer
from pipeline.options import progress_settings
from transforms.aggregate import SummarizeRun
from transforms.generate import GenerateSamples, passthrough_offline
from transforms.metric_calls import CallMetricEndpoints, needs_metric_calls
from transforms.progress import ProgressLines
from transforms.read import ReadRows
from transforms.score import ERRORS, ScoreRows
from transforms.write import WriteErrors, WriteRows, WriteSummary

__all__ = ["build_graph"]


def build_graph(
    pipeline: beam.Pipeline,
    config: EvalConfig,
    paths: list[str],
    output: str,
    limit: int | None,
    run_id: str,
) -> None:
    """Add the whole evaluation to ``pipeline``.

    Args:
        pipeline: the Beam pipeline to extend.
        config: the validated evaluation config.
        paths: the dataset files, sorted.
        output: the output directory.
        limit: evaluate only rows with ``row_index < limit``.
        run_id: unique per run; lets workers stop a failing strict run early.
    """
    scorer = RowScorer(config.metrics)
    read = ReadRows(paths, config.dataset.format, limit)
    rows = pipeline | "ReadRows" >> read
    if config.target is not None:
        # Spread rows over every worker before the slow stage: one file is read by one
        # worker, but each worker process has its own `parallelism` requests in flight.
        generated = (
            rows | "SpreadRows" >> beam.Reshuffle() | "GenerateSamples" >> beam.ParDo(GenerateSamples(config, run_id))
        )
    else:
        generated = rows | "NoTarget" >> beam.Map(passthrough_offline)
    if needs_metric_calls(config.metrics):
        generated = generated | "CallMetricEndpoints" >> beam.ParDo(CallMetricEndpoints(config.metrics))
    scored = generated | "ScoreRows" >> beam.ParDo(ScoreRows(config.metrics)).with_outputs(ERRORS, main="rows")
    _ = scored.rows | "WriteRows" >> WriteRows(output, scorer.score_names, scorer.label_names)
    _ = scored[ERRORS] | "WriteErrors" >> WriteErrors(output)
    _ = scored.rows | "SummarizeRun" >> SummarizeRun() | "WriteSummary" >> WriteSummary(output)
    interval, workers, local = progress_settings(pipeline.options)
    if interval > 0:
        _ = scored.rows | "Progress" >> ProgressLines(run_id, interval, workers, read.splits if local else None, limit)
