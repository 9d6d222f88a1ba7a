"""``--decide``'s gated scores: which are gated and at what margin and range, the groups, the wave's scores.

Shared by a single-target ``--decide`` (``pipeline.decide``) and a multi-target one
(``pipeline.decide_targets``): the gated scores are the policy's (with ``ok_rate``), each
with its margin m and range r; a gated score of unknown range is refused, since a
confidence sequence needs bounded values. Groups (``statistics.group_by`` values with at
least ``min_group_pairs`` rows) are fixed from the baseline's items before any decision, so
K, the NO-GO family's size, never changes as waves come in.
"""

from __future__ import annotations

import json

import numpy as np

from beameval.compare.policy import OK_RATE, GatePolicy
from beameval.compare.sequential import SequentialScore
from beameval.config.schema import EvalConfig
from beameval.config.statistics import field_path
from beameval.core.errors import ConfigError
from beameval.stats.breakdown import resolve, value_key
from pipeline.decide_rows import Side

__all__ = ["gated_scores", "group_members", "sequential_scores"]


def gated_scores(
    names: list[str], policy: GatePolicy, ranges: dict[str, tuple[float, float]]
) -> list[tuple[str, float, float]]:
    """``(name, margin, r)`` for every gated score, ``ok_rate`` first; a gated score of unknown range is refused."""
    gated = [(OK_RATE, policy.margin(OK_RATE, (0.0, 1.0)) or 0.0, 1.0)]
    for name in names:
        bounds = ranges.get(name)
        margin = policy.margin(name, bounds)
        if margin is None:
            continue
        if bounds is None or not bounds[1] > bounds[0]:
            raise ConfigError(
                f"--decide cannot bound {name!r}: its range is unknown, and a confidence sequence needs bounded "
                "values. Leave it out of the policy's scores, or declare its range (a judge score's range)."
            )
        gated.append((name, margin, bounds[1] - bounds[0]))
    return gated


def group_members(config: EvalConfig, base: Side, policy: GatePolicy) -> list[tuple[str, np.ndarray]]:
    """``(label, its rows)`` per ``statistics.group_by`` value with at least ``min_group_pairs`` rows.

    Fixed before the first wave (from the baseline's items), so K, the NO-GO family's size,
    does not change as waves come in; a group still needs ``min_group_pairs`` pairs to decide.
    """
    groups = []
    items = [json.loads(text) if text else None for text in base.items or []]
    for by in config.statistics.group_by:
        path = field_path(by)
        labels = np.array([value_key(resolve(item, path)) for item in items], dtype=object)
        for label in dict.fromkeys(labels.tolist()):
            members = base.row_index[labels == label]
            if len(members) >= policy.min_group_pairs:
                groups.append((f"[{by}={label}]", members))
    return groups


def sequential_scores(
    gated: list[tuple[str, float, float]],
    groups: list[tuple[str, np.ndarray]],
    pairs: dict[str, tuple[np.ndarray, np.ndarray]],
    policy: GatePolicy,
) -> list[SequentialScore]:
    """Every gated score's differences so far; each group's join the NO-GO family only (never needed for GO)."""
    scores = [SequentialScore(name, pairs[name][1], m, r, policy.min_pairs) for name, m, r in gated]
    least = max(policy.min_pairs, policy.min_group_pairs)
    for label, members in groups:
        for name, m, r in gated:
            rows, d = pairs[name]
            scores.append(SequentialScore(name + label, d[np.isin(rows, members)], m, r, least, for_go=False))
    return scores
