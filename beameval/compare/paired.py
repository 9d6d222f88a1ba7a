"""PairedSums: the per-score accumulator of paired rows, small and mergeable (a CombineFn delegates to it)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["PairedSums"]

#: Relative size below which a standard deviation is floating-point noise.
_ROUNDING = 1e-12


@dataclass(slots=True)
class PairedSums:
    """Sufficient statistics of the per-row differences ``d = candidate - baseline`` of one score.

    The spread is kept as Welford's running mean and sum of squared deviations (merged with
    Chan's formula) rather than raw sums of ``d`` and ``d²``: the textbook
    ``(Σd² - (Σd)²/n)/(n-1)`` cancels catastrophically when the differences are small against
    their mean, and partitions merge just as cheaply. For 0/1 scores ``regressed`` and
    ``improved`` are the McNemar discordant counts (1→0 and 0→1).

    Attributes:
        n: paired rows.
        mean_d: mean of the differences.
        m2_d: sum of squared deviations of the differences from their mean.
        sum_baseline: sum of the baseline values (for the baseline mean over the pairs).
        sum_candidate: sum of the candidate values.
        improved: rows whose score went up.
        regressed: rows whose score went down.
        binary: every value seen on either side is 0 or 1.
    """

    n: int = 0
    mean_d: float = 0.0
    m2_d: float = 0.0
    sum_baseline: float = 0.0
    sum_candidate: float = 0.0
    improved: int = 0
    regressed: int = 0
    binary: bool = True

    def add(self, baseline: float, candidate: float) -> None:
        """Fold in one paired row (both values finite)."""
        d = candidate - baseline
        self.n += 1
        step = d - self.mean_d
        self.mean_d += step / self.n
        self.m2_d += step * (d - self.mean_d)
        self.sum_baseline += baseline
        self.sum_candidate += candidate
        if d > 0:
            self.improved += 1
        elif d < 0:
            self.regressed += 1
        if self.binary and (baseline not in (0.0, 1.0) or candidate not in (0.0, 1.0)):
            self.binary = False

    @classmethod
    def of_arrays(cls, baseline: Any, candidate: Any) -> PairedSums:
        """The sums of many pairs at once (numpy arrays of finite values, same length): what a join bucket adds."""
        n = len(baseline)
        if n == 0:
            return cls()
        d = candidate - baseline
        mean = float(d.mean())
        return cls(
            n=n,
            mean_d=mean,
            m2_d=float(((d - mean) ** 2).sum()),
            sum_baseline=float(baseline.sum()),
            sum_candidate=float(candidate.sum()),
            improved=int((d > 0).sum()),
            regressed=int((d < 0).sum()),
            binary=bool(((baseline == 0) | (baseline == 1)).all() and ((candidate == 0) | (candidate == 1)).all()),
        )

    @staticmethod
    def merge(parts: Iterable[PairedSums]) -> PairedSums:
        """Combine partial sums (Chan et al.); the result does not depend on how rows were split."""
        merged = PairedSums()
        for part in parts:
            if part.n == 0:
                continue
            n = merged.n + part.n
            step = part.mean_d - merged.mean_d
            merged.m2_d += part.m2_d + step * step * merged.n * part.n / n
            merged.mean_d += step * part.n / n
            merged.n = n
            merged.sum_baseline += part.sum_baseline
            merged.sum_candidate += part.sum_candidate
            merged.improved += part.improved
            merged.regressed += part.regressed
            merged.binary = merged.binary and part.binary
        return merged

    @property
    def sd(self) -> float | None:
        """The sample standard deviation of the differences (n-1); None below two pairs."""
        if self.n < 2:
            return None
        sd = math.sqrt(max(self.m2_d, 0.0) / (self.n - 1))
        # Pairs that all moved by the same amount leave rounding noise (0.5 - 0.8 is not exactly -0.3 twice
        # over); a spread that small against the mean is no spread, so the se = 0 rules apply.
        return 0.0 if sd <= _ROUNDING * max(1.0, abs(self.mean_d)) else sd
