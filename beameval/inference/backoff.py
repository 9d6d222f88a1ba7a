"""Pure retry-wait arithmetic (exponential back-off with full jitter); the caller owns the clock and sleeping."""

from __future__ import annotations

from typing import Protocol

from beameval.inference.classify import Failure

__all__ = [
    "BACKOFF_BASE_S",
    "BACKOFF_CAP_S",
    "MAX_RETRY_WAIT_S",
    "RandomSource",
    "backoff_delay",
    "retry_wait",
    "wait_too_long",
]

BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 15.0
#: The longest single wait between attempts (``params.max_retry_wait``): a ``Retry-After: 86400`` must not
#: park a row, or the whole run, for a day.
MAX_RETRY_WAIT_S = 120.0


class RandomSource(Protocol):
    """Anything with ``random() -> float`` in [0, 1), e.g. ``random.Random``."""

    def random(self) -> float:
        """Return a uniform float in [0, 1)."""
        ...


def backoff_delay(attempt: int, rng: RandomSource, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S) -> float:
    """Return the jittered wait after failed attempt number ``attempt`` (1-based).

    Full jitter: uniform in ``[0, min(cap, base * 2 ** (attempt - 1)))``.

    Args:
        attempt: how many attempts have failed so far (1 after the first failure).
        rng: the random source (inject a seeded ``random.Random`` in tests).
        base: the first ceiling, in seconds.
        cap: the largest ceiling, in seconds.

    Returns:
        Seconds to wait, ``0 <= delay < min(cap, base * 2 ** (attempt - 1))``.

    """
    exponent = min(max(attempt, 1) - 1, 62)  # 2**62 * base already exceeds any cap
    ceiling = min(cap, base * (2.0**exponent))
    return rng.random() * ceiling


def retry_wait(failure: Failure, attempt: int, rng: RandomSource, max_wait: float = MAX_RETRY_WAIT_S) -> float:
    """Seconds to wait before retrying: never less than the server's ``Retry-After``, never more than ``max_wait``.

    Args:
        failure: the classified failure of the attempt that just failed.
        attempt: how many attempts have failed so far (1-based).
        rng: the random source.
        max_wait: the cap on any one wait (a longer ``Retry-After`` should fail the
            attempt instead; see ``wait_too_long``).

    Returns:
        ``min(max_wait, max(failure.retry_after or 0, backoff_delay(attempt, rng)))``.

    """
    return min(max_wait, max(failure.retry_after or 0.0, backoff_delay(attempt, rng)))


def wait_too_long(failure: Failure, max_wait: float = MAX_RETRY_WAIT_S) -> bool:
    """True when the server asks for a longer wait than ``max_wait``: the attempt then fails at once.

    Waiting less than the server asked would only earn another refusal, and waiting a
    ``Retry-After: 86400`` would hang the run; giving up is the honest answer.
    """
    return failure.retry_after is not None and failure.retry_after > max_wait
