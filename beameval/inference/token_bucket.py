"""A continuously refilled token bucket on a monotonic clock: the local form of every rate the pacer keeps."""

from __future__ import annotations

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` units a second flow in, up to ``capacity``; a send takes its cost out.

    A cost larger than the whole capacity is let through when the bucket is full (so a
    long prompt under a small tokens-per-second share still goes, and the level goes
    negative: what follows waits for it). Corrections (``adjust``) may push the level
    below zero too, never above the capacity.

    Args:
        rate: units per second (> 0).
        capacity: the most units that can go at once (the burst).
        now: the clock reading the bucket starts full at.

    """

    __slots__ = ("capacity", "level", "rate", "_at")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        self.capacity = max(capacity, 1e-9)
        self.level = self.capacity
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self.level = min(self.capacity, self.level + (now - self._at) * self.rate)
            self._at = now

    def wait(self, cost: float, now: float) -> float:
        """Seconds until ``cost`` can be taken (0 when it can be now); takes nothing."""
        self._refill(now)
        need = min(cost, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def take(self, cost: float, now: float) -> None:
        """Take ``cost`` out (after ``wait`` said 0)."""
        self._refill(now)
        self.level -= cost

    def adjust(self, extra: float, now: float) -> None:
        """Take ``extra`` more (a negative value gives back), e.g. when the real token count is known."""
        self._refill(now)
        self.level = min(self.capacity, self.level - extra)

    def retune(self, rate: float, capacity: float, now: float) -> None:
        """Refill at ``rate`` from now on, holding at most ``capacity`` (a learnt rate that moved)."""
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self._refill(now)
        self.rate = rate
        self.capacity = max(capacity, 1e-9)
        self.level = min(self.level, self.capacity)

    def lower_to(self, level: float, now: float) -> None:
        """Never hold more than ``level`` (what the provider says is left)."""
        self._refill(now)
        self.level = min(self.level, level)
