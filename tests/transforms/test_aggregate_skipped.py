"""Rows skipped at the budget (status ``skipped``, every score NaN) stay out of the repeat and cluster statistics.

``SummarizeRun`` runs on a real Beam runner; each expectation is computed here from the rows
that were evaluated (numpy, ``math.comb``, the CR1 sandwich of the pipeline's statistics test),
and a run with skipped rows must give the statistics of the same run without them.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beameval.config.statistics import StatisticsConfig
from beameval.core.records import RowFailure, ScoredRow
from tests.pipeline.test_statistics_pipeline import cr1
from transforms.aggregate import SummarizeRun

NAME = "m"
K = 3


def _write(summary: dict[str, Any], path: str) -> None:
    Path(path).write_text(json.dumps(summary))


def summarize(rows: list[ScoredRow], repeats: int, path: Path) -> dict[str, Any]:
    """The run summary of ``rows`` (clustered by ``c``, grouped by ``g``), through the FnApiRunner."""
    statistics_config = StatisticsConfig(cluster_by="c", group_by=["g"], confidence_level=0.9)
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = (
            pipeline
            | beam.Create(rows, reshuffle=False)
            | SummarizeRun([NAME], statistics_config, repeats)
            | beam.Map(_write, str(path))
        )
    return dict(json.loads(path.read_text()))


def item(row: int) -> str:
    return json.dumps({"c": f"c{row // 3}", "g": "odd" if row % 2 else "even"})


def skipped(row: int, sample: int = 0) -> ScoredRow:
    failure = RowFailure("sample_generation", ["the run's budget was reached"], skipped=True)
    return ScoredRow(row, item(row), None, {NAME: math.nan}, failure, sample_index=sample)


def scored(row: int, value: float, sample: int = 0) -> ScoredRow:
    failure = None if value == value else RowFailure("scoring", ["metric failed"])  # NaN: a failed row, not skipped
    return ScoredRow(row, item(row), "out", {NAME: value}, failure, sample_index=sample)


def test_skipped_rows_leave_the_clustered_statistics_as_without_them(tmp_path: Path) -> None:
    values = {row: float((row * 7) % 5 > 1) for row in range(30)}
    values[7] = math.nan  # a failed row: counted as NaN, unlike the skipped ones
    skip = {4, 13, 27, 28, 29}  # two scattered rows and the whole cluster c9
    evaluated = [scored(row, value) for row, value in values.items() if row not in skip]
    with_skipped = summarize([*evaluated, *(skipped(row) for row in sorted(skip))], 1, tmp_path / "a.json")
    without = summarize(evaluated, 1, tmp_path / "b.json")

    kept = [row for row in values if row not in skip and values[row] == values[row]]
    score = with_skipped["scores"][NAME]
    se, clusters = cr1([values[row] for row in kept], [row // 3 for row in kept])
    assert clusters == 9  # c9 held only skipped rows: it is no cluster
    assert (score["count"], score["nan_count"]) == (len(kept), 1) == (24, 1)
    assert score["mean"] == pytest.approx(np.mean([values[row] for row in kept]), rel=1e-12)
    assert score["ci_method"] == "clustered-t"
    assert score["stderr"] == pytest.approx(se, rel=1e-10)
    assert with_skipped["counts"] == {"rows": 30, "ok": 24, "errors": 1, "skipped": 5}
    assert with_skipped["scores"] == without["scores"]
    assert [g["scores"] for g in with_skipped["groups"]] == [g["scores"] for g in without["groups"]]


def test_skipped_samples_leave_the_repeat_statistics_as_without_them(tmp_path: Path) -> None:
    samples = {row: [float((row + s) % 2) for s in range(K)] for row in range(12)}
    samples[5] = [math.nan] * K  # a failed row
    skip = {(4, s) for s in range(K)} | {(10, s) for s in range(K)} | {(8, K - 1)}  # rows 4 and 10, row 8's last
    rows = [
        skipped(row, s) if (row, s) in skip else scored(row, value, s)
        for row, values in samples.items()
        for s, value in enumerate(values)
    ]
    score = summarize(rows, K, tmp_path / "a.json")["scores"][NAME]

    evaluated = {
        row: [v for s, v in enumerate(values) if (row, s) not in skip and v == v] for row, values in samples.items()
    }
    evaluated = {row: values for row, values in evaluated.items() if values}
    complete = {row: values for row, values in evaluated.items() if len(values) == K}  # row 8 is not: 2 of 3
    assert sorted(complete) == [0, 1, 2, 3, 6, 7, 9, 11]
    for k in range(1, K + 1):
        correct = [int(sum(values)) for values in complete.values()]
        at_k = np.mean([1 - math.comb(K - c, k) / math.comb(K, k) for c in correct])
        hat_k = np.mean([math.comb(c, k) / math.comb(K, k) for c in correct])
        assert score["pass_at_k"][str(k)] == pytest.approx(at_k, rel=1e-12)
        assert score["pass_hat_k"][str(k)] == pytest.approx(hat_k, rel=1e-12)
    variances = [statistics.variance(values) for values in evaluated.values() if len(values) >= 2]
    assert score["within_row_variance"] == pytest.approx(np.mean(variances), rel=1e-12)
    flat = [v for values in evaluated.values() for v in values]
    assert (score["count"], score["mean"]) == (len(flat), pytest.approx(np.mean(flat), rel=1e-12))
    means = {row: float(np.mean(values)) for row, values in evaluated.items()}
    se, clusters = cr1(list(means.values()), [row // 3 for row in means])  # clustered over the per-row means
    assert clusters == 4
    assert (score["ci_method"], score["stderr"]) == ("clustered-t", pytest.approx(se, rel=1e-10))
