"""trec_eval's ranking measures for one query, in plain Python.

The retrieval metrics (``beameval.metrics.retrieval``) read a row's ranked list and its
graded judgements and call these. Each function follows the trec_eval 9 source that
``pytrec_eval`` wraps (``m_P.c``, ``m_recall.c``, ``m_map_cut.c``, ``m_ndcg_cut.c``,
``m_recip_rank.c``), with trec_eval's defaults: relevance level 1 (a grade of at least 1
is relevant), gains equal to the grade (a grade of 0 or below gains nothing), and every
retrieved document counted (no ``-M`` limit). ``tests/metrics/test_retrieval_parity.py``
checks them against ``pytrec_eval`` on random runs.

Ranking (``ranked_ids``) is trec_eval's too: documents with scores are ordered by score
descending, then by document id descending (``strcmp`` order, which is Python's order of
``str``); a list without scores keeps its order. A document listed twice keeps its first
entry.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from beameval.core.errors import MetricError

__all__ = [
    "Judged",
    "average_precision_cut",
    "judge",
    "ndcg_cut",
    "parse_relevant",
    "precision",
    "ranked_ids",
    "recall",
    "reciprocal_rank",
]


def ranked_ids(value: Any) -> list[str]:
    """The ranked document ids of a rendered ``retrieved`` value, in trec_eval's order.

    Accepted: a list of ids (strings or integers), a list of ``{"id", "score"}`` objects
    (all with a score, or none), a mapping ``{id: score}``, or any of these as JSON text.

    Raises:
        MetricError: the value is none of these, or a score is not a finite number.
    """
    value = _decoded(value, "retrieved")
    if isinstance(value, Mapping):
        entries: list[tuple[str, float | None]] = [(_doc_id(key), _score(score)) for key, score in value.items()]
    elif isinstance(value, list):
        entries = [_entry(entry, position) for position, entry in enumerate(value)]
    else:
        raise MetricError(
            f"'retrieved' must be a list of document ids or {{id, score}} objects, got {type(value).__name__}."
        )
    first: dict[str, float | None] = {}
    for doc_id, score in entries:
        first.setdefault(doc_id, score)  # a duplicate keeps its first entry
    scored = [score is not None for score in first.values()]
    if not any(scored):
        return list(first)
    if not all(scored):
        raise MetricError("'retrieved' mixes entries with and without a score; give every entry a score, or none.")
    # trec_eval (form_res_rels.c): score descending, then document id descending.
    return sorted(first, key=lambda doc_id: (first[doc_id], doc_id), reverse=True)


def parse_relevant(value: Any) -> dict[str, int]:
    """The judgements ``{doc_id: grade}`` of a rendered ``relevant`` value.

    A list of ids means grade 1 for each. Grades are integers (a float must be integral, as
    trec_eval's qrels are).

    Raises:
        MetricError: the value is not a mapping or list, or a grade is not an integer.
    """
    value = _decoded(value, "relevant")
    if isinstance(value, list):
        return {_doc_id(doc_id): 1 for doc_id in value}
    if not isinstance(value, Mapping):
        raise MetricError(f"'relevant' must be a mapping {{doc_id: grade}}, got {type(value).__name__}.")
    return {_doc_id(doc_id): _grade(doc_id, grade) for doc_id, grade in value.items()}


class Judged(NamedTuple):
    """One query's ranked list as trec_eval sees it.

    Attributes:
        grades: the grade of each ranked document (0 when it is not judged).
        num_rel: how many judged documents are relevant (grade >= 1).
        ideal: the positive grades of the judgements, highest first (nDCG's ideal ranking).
    """

    grades: list[int]
    num_rel: int
    ideal: list[int]


def judge(ranked: Sequence[str], relevant: Mapping[str, int]) -> Judged:
    """The grades of a ranked list under ``relevant``, with the relevant count and the ideal gains."""
    return Judged(
        [relevant.get(doc_id, 0) for doc_id in ranked],
        sum(1 for grade in relevant.values() if grade >= 1),
        sorted((grade for grade in relevant.values() if grade > 0), reverse=True),
    )


def precision(judged: Judged, k: int) -> float:
    """``P_k``: relevant documents in the top k over k (a list shorter than k counts as padded)."""
    return sum(1 for grade in judged.grades[:k] if grade >= 1) / k


def recall(judged: Judged, k: int) -> float:
    """``recall_k``: relevant documents in the top k over every relevant document."""
    return sum(1 for grade in judged.grades[:k] if grade >= 1) / judged.num_rel


def average_precision_cut(judged: Judged, k: int) -> float:
    """``map_cut_k``: the sum of the precision at each relevant rank within k, over every relevant document."""
    total, found = 0.0, 0
    for rank, grade in enumerate(judged.grades[:k], start=1):
        if grade >= 1:
            found += 1
            total += found / rank
    return total / judged.num_rel


def reciprocal_rank(judged: Judged, k: int | None = None) -> float:
    """``recip_rank`` (whole list) or ``mrr_cut_k``: 1 / the rank of the first relevant document, 0 if none."""
    for rank, grade in enumerate(judged.grades if k is None else judged.grades[:k], start=1):
        if grade >= 1:
            return 1.0 / rank
    return 0.0


def ndcg_cut(judged: Judged, k: int) -> float:
    """``ndcg_cut_k``: DCG of the top k (gain = grade, discount log2(rank + 1)) over the ideal ranking's."""
    dcg = sum(grade / math.log2(rank + 1) for rank, grade in enumerate(judged.grades[:k], start=1) if grade > 0)
    ideal = sum(grade / math.log2(rank + 1) for rank, grade in enumerate(judged.ideal[:k], start=1))
    return dcg / ideal if ideal > 0 else 0.0


def _decoded(value: Any, what: str) -> Any:
    """A JSON text (a CSV cell, a string column) decoded; anything else as it is."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise MetricError(f"'{what}' rendered text that is not JSON: {value[:80]!r}.") from None


def _doc_id(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise MetricError(f"a document id must be a string or an integer, got {type(value).__name__}: {value!r:.80}.")
    return str(value)


def _entry(entry: Any, position: int) -> tuple[str, float | None]:
    if isinstance(entry, Mapping):
        if "id" not in entry:
            raise MetricError(f"'retrieved' entry {position} has no 'id': {dict(entry)!r:.120}.")
        return _doc_id(entry["id"]), _score(entry["score"]) if entry.get("score") is not None else None
    return _doc_id(entry), None


def _score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MetricError(f"a retrieval score must be a finite number, got {value!r:.80}.")
    return float(value)


def _grade(doc_id: Any, value: Any) -> int:
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not integral:
        raise MetricError(f"the grade of document {doc_id!r} must be an integer, got {value!r:.80}.")
    return int(value)
