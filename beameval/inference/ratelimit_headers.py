"""The OpenAI-style ``x-ratelimit-*`` reply headers, read into numbers the pacer can use.

OpenAI, Azure OpenAI and most gateways in front of NIM send, for requests and for tokens:
``x-ratelimit-limit-*`` (the per-minute limit), ``x-ratelimit-remaining-*`` (what is left
now) and ``x-ratelimit-reset-*`` (how long until it is all back), the last as a Go-style
duration: ``1s``, ``6m0s``, ``250ms``, ``20ms``, ``1h2m3.5s`` (a bare number is seconds).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Advertised", "advertised", "parse_duration"]

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(text: str | None) -> float | None:
    """Seconds in a duration such as ``6m0s`` or ``250ms`` (a bare number is seconds); None if unreadable."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) and value >= 0 else None
    total, position = 0.0, 0
    for match in _PART.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        position = match.end()
    return total if position == len(text) else None


@dataclass(frozen=True, slots=True)
class Advertised:
    """One advertised limit (requests or tokens): per minute, left now, and seconds until it is full again."""

    limit: float
    remaining: float
    reset_s: float | None


def advertised(headers: Mapping[str, str], kind: str) -> Advertised | None:
    """The ``kind`` (``requests`` or ``tokens``) limit the reply advertises; None when it sends none usable.

    ``headers`` must be case-insensitive (aiohttp's are); a limit without a readable
    ``remaining`` is ignored, as is a non-positive limit.
    """
    limit = _number(headers.get(f"x-ratelimit-limit-{kind}"))
    remaining = _number(headers.get(f"x-ratelimit-remaining-{kind}"))
    if limit is None or remaining is None or limit <= 0:
        return None
    return Advertised(limit, max(0.0, remaining), parse_duration(headers.get(f"x-ratelimit-reset-{kind}")))


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None
