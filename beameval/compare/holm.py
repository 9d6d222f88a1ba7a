"""Holm's step-down correction: gating several scores at once without inflating the false NO-GO rate."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["holm"]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the input order.

    Sorted ascending, the i-th smallest (from 1) of m becomes ``max_{j<=i} min(1, (m-j+1)·p_(j))``;
    comparing each to α controls the family-wise error rate at α for any dependence.

    Args:
        p_values: one raw p-value per gated score.

    Returns:
        The adjusted p-values, each in [0, 1], in the same order as ``p_values``.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
