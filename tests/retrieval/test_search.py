"""Exact search by blocks: any cut of the corpus into blocks, merged, equals one search over the whole corpus."""

from __future__ import annotations

import random

import numpy as np
import pytest

from beameval.retrieval.search import block_top_k, merge_top_k, unit_rows


def full_search(queries: np.ndarray, ids: list[str], documents: np.ndarray, k: int) -> list[list[tuple[float, str]]]:
    """The reference answer: every score at once, rounded to float32, sorted by score then id ascending."""
    scores = (queries @ documents.T).astype(np.float32)
    return [
        sorted(((float(s), i) for s, i in zip(row, ids, strict=True)), key=lambda h: (-h[0], h[1]))[:k]
        for row in scores
    ]


@pytest.mark.parametrize("seed", range(40))
def test_blocks_merged_equal_the_whole_search_with_ties(seed: int) -> None:
    rng = random.Random(seed)
    count, width = rng.randint(1, 60), rng.choice([2, 3, 8])
    # Few distinct small-integer vectors: many exact ties, as word counts give.
    pool = [[rng.randint(0, 2) for _ in range(width)] for _ in range(rng.randint(1, 6))]
    vectors = [rng.choice(pool) for _ in range(count)]
    vectors = [v if any(v) else [1] + v[1:] for v in vectors]
    ids = rng.sample([f"d{n}" for n in range(200)] + [str(n) for n in range(200)], count)
    documents = unit_rows(vectors)
    queries = unit_rows([[rng.randint(0, 3) for _ in range(width - 1)] + [1] for _ in range(5)])
    k = rng.choice([1, 2, 5, 10, 100])
    order = list(range(count))
    rng.shuffle(order)  # blocks hold documents in any order
    cuts = sorted(rng.sample(range(1, count), rng.randint(0, min(4, count - 1)))) if count > 1 else []
    blocks = [order[a:b] for a, b in zip([0, *cuts], [*cuts, count], strict=True)]
    per_query: dict[int, list[list[tuple[float, str]]]] = {q: [] for q in range(5)}
    for block in blocks:
        for key, hits in block_top_k(list(range(5)), queries, [ids[i] for i in block], documents[block], k):
            per_query[key].append(hits)  # type: ignore[index]
    expected = full_search(queries, ids, documents, k)
    for query in range(5):
        assert merge_top_k(per_query[query], k) == expected[query]


def test_a_zero_vector_is_refused() -> None:
    with pytest.raises(ValueError, match="all zeros"):
        unit_rows([[1.0, 0.0], [0.0, 0.0]])
