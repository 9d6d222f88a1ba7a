"""The retrieval metrics equal trec_eval's (``pytrec_eval``) on thousands of random runs.

The runs are built to hit what trec_eval decides on its own: tied scores (it ranks them by
document id descending), duplicate ids (the first entry kept), empty lists, graded and
negative judgements, unjudged documents, cut-offs beyond the list, and queries with no
relevant document (ours: NaN with a reason; trec_eval: 0 or nothing).
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from beameval.metrics.base import MetricContext
from beameval.metrics.retrieval import NAN_REASON, NO_RELEVANT

pytrec_eval = pytest.importorskip("pytrec_eval")

CASES = 3000
TOLERANCE = 1e-9
TYPES = ("retrieval-ndcg", "retrieval-recall", "retrieval-precision", "retrieval-map", "retrieval-mrr")
# Ids whose string order differs from their numeric order ("10" < "9"), and shared prefixes.
POOL = [f"d{n}" for n in range(12)] + [str(n) for n in (1, 2, 9, 10, 11, 100)] + ["doc", "doc-1", "Doc", "é"]


def random_case(rng: random.Random) -> tuple[list[Any], dict[str, int], list[int]]:
    """A ranked list as a row would give it, its judgements, and the cut-offs."""
    length = rng.choice([0, 1, 2, 3, 5, 8, 12, 20, 30])
    ids = [rng.choice(POOL) for _ in range(length)]  # with repeats: duplicates
    style = rng.choice(["ids", "scored", "scored", "tied", "mapping"])
    retrieved: Any
    if style == "ids":
        retrieved = ids
    elif style == "mapping":
        retrieved = {doc_id: rng.choice([0.5, 1.0, 2.0, rng.random()]) for doc_id in ids}
    else:
        levels = [1.0, 0.5, 0.0, -1.5] if style == "tied" else None
        retrieved = [{"id": doc_id, "score": rng.choice(levels) if levels else rng.uniform(-3, 3)} for doc_id in ids]
    judged = rng.sample(POOL, rng.randint(0, 8))
    relevant = {doc_id: rng.choice([-1, 0, 0, 1, 1, 2, 3]) for doc_id in judged}
    cutoffs = sorted(rng.sample([1, 2, 3, 5, 10, 20, 100, 1000], rng.randint(1, 4)))
    return retrieved, relevant, cutoffs


def trec_run(retrieved: Any) -> dict[str, float]:
    """The run pytrec_eval is given: first entry of each id; an unscored list scored by its order."""
    if isinstance(retrieved, dict):
        return dict(retrieved)
    run: dict[str, float] = {}
    for position, entry in enumerate(retrieved):
        doc_id, score = (entry["id"], entry["score"]) if isinstance(entry, dict) else (entry, -position)
        run.setdefault(doc_id, float(score))
    return run


def oracle(retrieved: Any, relevant: dict[str, int], cutoffs: list[int]) -> dict[str, float]:
    ks = ",".join(map(str, cutoffs))
    measures = {f"ndcg_cut.{ks}", f"recall.{ks}", f"P.{ks}", f"map_cut.{ks}", "recip_rank"}
    evaluator = pytrec_eval.RelevanceEvaluator({"q": relevant}, measures)
    values = dict(evaluator.evaluate({"q": trec_run(retrieved)}).get("q", {}))
    rr = values.get("recip_rank", 0.0)
    for k in cutoffs:  # mrr_cut_k is recip_rank when the first relevant rank is within k
        values[f"mrr_cut_{k}"] = rr if rr > 0 and round(1 / rr) <= k else 0.0
    return values


def test_every_measure_equals_pytrec_eval_on_random_runs(build) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(38)
    worst, compared, no_relevant = 0.0, 0, 0
    metrics: dict[tuple[str, tuple[int, ...]], Any] = {}
    for case in range(CASES):
        retrieved, relevant, cutoffs = random_case(rng)
        expected = oracle(retrieved, relevant, cutoffs)
        has_relevant = any(grade >= 1 for grade in relevant.values())
        ctx = MetricContext({"relevant": relevant}, {"output": retrieved})
        for type_name in TYPES:
            key = (type_name, tuple(cutoffs))
            metric = metrics[key] = metrics.get(key) or build(type_name, k=cutoffs)
            scores = metric.score(ctx)
            for name in metric.output_names():
                value = scores[name]
                if not has_relevant:
                    assert math.isnan(value), (case, type_name, name)
                    continue
                difference = abs(value - expected[name])
                assert difference <= TOLERANCE, (case, name, value, expected[name], retrieved, relevant)
                worst, compared = max(worst, difference), compared + 1
            assert scores[NAN_REASON] == ("" if has_relevant else NO_RELEVANT)
        no_relevant += not has_relevant
    print(f"\n{CASES} random queries, {compared} values compared, max |ours - pytrec_eval| = {worst:.3g}")
    assert compared > 20_000 and 100 < no_relevant < CASES / 2
