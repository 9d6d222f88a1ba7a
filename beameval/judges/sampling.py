"""Choosing the rows a person labels: a seeded sample stratified by the judge's score, in bounded memory.

A simple random sample of a run where the judge says "good" nine times in ten gives a
person almost no "bad" rows to check, and kappa on it says little about the rare levels.
Each judge value (stratum) keeps a reservoir of at most ``size`` rows (Algorithm R with a
seeded generator), so memory is bounded by ``size`` times the number of levels whatever
the run's size; ``result`` then takes an equal share from every stratum, handing the share
a small stratum cannot fill to the others.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

__all__ = ["StratifiedSampler"]

S = TypeVar("S", bound=Hashable)  # a stratum: the judge's value


class StratifiedSampler(Generic[S]):
    """Up to ``size`` rows, as evenly as possible across strata.

    Args:
        size: how many rows to choose in all.
        seed: the generator's seed (the same rows in the same order give the same sample).
    """

    def __init__(self, size: int, seed: int = 0) -> None:
        if size < 1:
            raise ValueError("the sample size must be at least 1")
        self._size = size
        self._rng = random.Random(seed)
        self._reservoirs: dict[S, list[Any]] = {}
        self._seen: dict[S, int] = {}

    def add(self, stratum: S, row: Any) -> None:
        """Offer one row of ``stratum``."""
        reservoir = self._reservoirs.setdefault(stratum, [])
        seen = self._seen[stratum] = self._seen.get(stratum, 0) + 1
        if len(reservoir) < self._size:
            reservoir.append(row)
            return
        slot = self._rng.randrange(seen)
        if slot < self._size:
            reservoir[slot] = row

    def counts(self) -> dict[S, int]:
        """Rows offered per stratum."""
        return dict(self._seen)

    def result(self) -> list[Any]:
        """The sample, stratum by stratum in sorted order: equal shares, the unfilled remainder spread."""
        strata = sorted(self._reservoirs, key=repr)
        shares = dict.fromkeys(strata, 0)
        left = self._size
        open_strata = [s for s in strata if self._reservoirs[s]]
        while left > 0 and open_strata:
            share = max(1, left // len(open_strata))
            for stratum in list(open_strata):
                take = min(share, len(self._reservoirs[stratum]) - shares[stratum], left)
                shares[stratum] += take
                left -= take
                if shares[stratum] == len(self._reservoirs[stratum]):
                    open_strata.remove(stratum)
                if left == 0:
                    break
        return [row for stratum in strata for row in self._reservoirs[stratum][: shares[stratum]]]
