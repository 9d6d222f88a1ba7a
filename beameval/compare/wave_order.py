"""``--decide``'s evaluation order: a seeded random permutation of the rows, and the waves that cut it.

The order ranks each row by a 64-bit hash of ``(seed, row_index)`` (SplitMix64's finaliser,
on integers, so numpy computes a million in milliseconds), ties broken by ``row_index``. It
depends on nothing else: not the runner, the number of workers, nor how the files are
split into bundles, so two invocations with the same seed agree on which rows come first
and a rerun's earlier waves are answered from the journal.
"""

from __future__ import annotations

import numpy as np

__all__ = ["evaluation_order", "wave_ends"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 whose outputs look independent."""
    z = values.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def evaluation_order(row_indices: np.ndarray, seed: int) -> np.ndarray:
    """Each row's 0-based position in the evaluation order.

    Args:
        row_indices: the rows' ``row_index`` values (distinct).
        seed: ``decide.seed``.

    Returns:
        ``eval_order`` per row, aligned with ``row_indices``.
    """
    rows = np.asarray(row_indices, dtype=np.int64)
    with np.errstate(over="ignore"):
        keys = _mix(_mix(np.full(rows.shape, seed, dtype=np.uint64)) + rows.astype(np.uint64) * _GOLDEN)
    ranking = np.lexsort((rows, keys))  # by hash, then row_index
    order = np.empty(len(rows), dtype=np.int64)
    order[ranking] = np.arange(len(rows), dtype=np.int64)
    return order


def wave_ends(rows: int, wave_rows: int) -> list[int]:
    """How many rows have been evaluated after each wave: ``wave_rows``, twice that, …, ``rows``."""
    return [min(end, rows) for end in range(wave_rows, rows + wave_rows, wave_rows)] or [0]
