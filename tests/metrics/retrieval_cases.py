"""A shared hand-worked query for the retrieval metric tests, and a one-row scorer."""

from __future__ import annotations

from typing import Any

from beameval.metrics.base import MetricContext

#: Relevant at ranks 1 (grade 2) and 3 (grade 1); ``c`` (grade 1) is never retrieved; ``x`` is judged 0.
RUN = ["a", "x", "b", "y"]
QRELS = {"a": 2, "b": 1, "c": 1, "x": 0}


def scores(build: Any, type_name: str, retrieved: Any, relevant: Any, k: tuple[int, ...] = (1, 2, 5)) -> dict[str, Any]:
    """One row's scores of metric ``type_name`` at cut-offs ``k``, the row holding the run and the judgements."""
    metric = build(type_name, retrieved="{{ item.run }}", relevant="{{ item.qrels }}", k=list(k))
    return dict(metric.score(MetricContext({"run": retrieved, "qrels": relevant}, {})))
