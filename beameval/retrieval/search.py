"""Exact nearest-neighbour search by cosine similarity, one block of documents at a time, and the top-k merge.

The Beam stages (``transforms.retrieval``) cut the corpus into blocks, score every query
against each block here (``block_top_k``) and merge the blocks' lists per query
(``merge_top_k``), so no worker holds more than one block of vectors. The result equals a
search over the whole corpus at once because the per-block lists keep every document tied
at their k-th score and both steps order by the same key (``rank_key``).

Scores are the cosine similarities computed in float64 and then rounded to float32 (the
precision embeddings are served at): sums taken in a different order (a block of another
size, another BLAS kernel) then give the same score, so a tie is a tie wherever it is
computed and is broken by document id, ascending (as the reference SDK does).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Iterator, Sequence

import numpy as np

__all__ = ["Hit", "block_top_k", "merge_top_k", "rank_key", "unit_rows"]

#: ``(score, doc_id)``: one retrieved document.
Hit = tuple[float, str]


def rank_key(hit: Hit) -> tuple[float, str]:
    """Sort key of a hit: score descending, then document id ascending."""
    return -hit[0], hit[1]


def unit_rows(vectors: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """The vectors as float64 rows of length 1.

    Raises:
        ValueError: a vector has length 0 (its cosine with anything is undefined).
    """
    matrix = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if matrix.size and not norms.all():
        raise ValueError("an embedding is all zeros, so its cosine similarity is undefined")
    return matrix / norms


def block_top_k(
    query_keys: Sequence[Hashable], queries: np.ndarray, doc_ids: Sequence[str], documents: np.ndarray, k: int
) -> Iterator[tuple[Hashable, list[Hit]]]:
    """Each query's best ``k`` documents of one block, with every document tied at the k-th score.

    Args:
        query_keys: one key per query row.
        queries: unit query vectors, one row per key.
        doc_ids: the block's document ids.
        documents: the block's unit document vectors, one row per id.
        k: how many to keep.

    Yields:
        ``(query key, hits)``, hits in ``rank_key`` order; the list may be longer than ``k``
        only by documents tied with the k-th (``merge_top_k`` cuts it).
    """
    if not len(doc_ids) or not len(query_keys):
        return
    scores = (queries @ documents.T).astype(np.float32)
    id_rank = np.argsort(np.argsort(np.asarray(doc_ids, dtype=object), kind="stable"), kind="stable")
    count = len(doc_ids)
    for key, row in zip(query_keys, scores, strict=True):
        if k < count:
            kth = row[np.argpartition(-row, k - 1)[k - 1]]
            candidates = np.flatnonzero(row >= kth)  # the whole tie group at the k-th score
        else:
            candidates = np.arange(count)
        ordered = candidates[np.lexsort((id_rank[candidates], -row[candidates]))]
        yield key, [(float(row[index]), doc_ids[index]) for index in ordered]


def merge_top_k(lists: Iterable[Iterable[Hit]], k: int) -> list[Hit]:
    """The best ``k`` hits of several lists, in ``rank_key`` order (a document in two lists counts once)."""
    best: dict[str, float] = {}
    for hits in lists:
        for score, doc_id in hits:
            if doc_id not in best or score > best[doc_id]:
                best[doc_id] = score
    return heapq.nsmallest(k, ((score, doc_id) for doc_id, score in best.items()), key=rank_key)
