"""The OpenAI-style ``x-ratelimit-*`` reply headers, read into numbers the pacer can use.

OpenAI, Azure OpenAI and most gateways in front of NIM send, for requests and for tokens:
``x-ratelimit-limit-*`` (the per-minute limit), ``x-ratelimit-remaining-*`` (what is left
now) and ``x-ratelimit-reset-*`` (how long until it is all back), the last as a Go-style
duration: ``1s``, ``6m0s``, ``250ms``, ``20ms``, ``1h2m3.5s`` (a bare number is seconds).

A value is believed only when it is a finite number, the limit positive and at least one
request or 100 tokens a minute (``MIN_PER_MINUTE``), the remaining count not negative:
``x-ratelimit-limit-requests: 0.001`` would otherwise hold every request for a day. What
is not believed comes back as ``Unusable`` (the pacer warns once and ignores it).

``HeardLimits`` carries one reply's ``x-ratelimit-*`` headers from the process that read
it (the preflight's) to the worker processes, so their pacers start at those limits, or
know that the endpoint advertises none, without sending a request alone first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MIN_PER_MINUTE", "Advertised", "HeardLimits", "Unusable", "advertised", "parse_duration"]

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
#: The smallest per-minute limit believed, per kind: below it a header is taken for a mistake.
MIN_PER_MINUTE = {"requests": 1.0, "tokens": 100.0}
#: Characters of a header value quoted in a warning (a hostile value may be long).
_QUOTED = 40
_PREFIX = "x-ratelimit-"


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


@dataclass(frozen=True, slots=True)
class Unusable:
    """An advertised value the pacer does not believe: which header, what it said, and why not."""

    header: str
    value: str
    reason: str

    def __str__(self) -> str:
        return f"{self.header}: {self.value[:_QUOTED]!r} ({self.reason})"


@dataclass(frozen=True, slots=True)
class HeardLimits:
    """What one reply of an endpoint advertised about its limits, for pacers in other processes to start from.

    Attributes:
        endpoint_key: the engine's key of the endpoint that replied (URL, model, key
            fingerprint): a pacer of another endpoint ignores it.
        headers: the reply's ``x-ratelimit-*`` headers, names in lower case; empty when
            it advertised none.
    """

    endpoint_key: str
    headers: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, endpoint_key: str, headers: Mapping[str, str]) -> HeardLimits:
        """The ``x-ratelimit-*`` headers of a reply of ``endpoint_key`` (any others are left out)."""
        kept = ((name.lower(), value) for name, value in headers.items())
        return cls(endpoint_key, tuple((name, value) for name, value in kept if name.startswith(_PREFIX)))

    def mapping(self) -> dict[str, str]:
        """The headers as ``advertised`` reads them (lower-case names)."""
        return dict(self.headers)


def advertised(headers: Mapping[str, str], kind: str) -> Advertised | Unusable | None:
    """The ``kind`` (``requests`` or ``tokens``) limit the reply advertises.

    ``headers`` must be case-insensitive (aiohttp's are). None when it sends no limit, or
    a limit without ``remaining`` (nothing to pace by); ``Unusable`` when a value it sends
    is not believable (see the module docstring).
    """
    name = f"x-ratelimit-limit-{kind}"
    text = headers.get(name)
    if text is None:
        return None
    limit = _number(text)
    if limit is None or limit <= 0:
        return Unusable(name, text, "not a positive finite number")
    least = MIN_PER_MINUTE[kind]
    if limit < least:
        return Unusable(name, text, f"less than {least:g} {kind} a minute")
    remaining_name = f"x-ratelimit-remaining-{kind}"
    remaining_text = headers.get(remaining_name)
    if remaining_text is None:
        return None
    remaining = _number(remaining_text)
    if remaining is None or remaining < 0:
        return Unusable(remaining_name, remaining_text, "not a finite number of zero or more")
    return Advertised(limit, remaining, parse_duration(headers.get(f"x-ratelimit-reset-{kind}")))


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None
