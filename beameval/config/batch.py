"""The ``batch:`` settings of an endpoint in ``mode: batch`` (provider Batch APIs); the providers' limits by default."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from beameval.config.frozen import Frozen

__all__ = ["BatchSettings"]

#: OpenAI's documented limits of one batch input file: 50,000 requests and 200 MB.
MAX_REQUESTS = 50_000
MAX_BYTES = 200_000_000
#: The only completion window the Batch API offers: 24 hours.
DAY_S = 86_400


class BatchSettings(Frozen):
    """How requests are packed into batches and how long the run waits for them.

    Attributes:
        max_requests: the most requests in one batch (the provider allows 50,000).
        max_bytes: the largest input file, in bytes (the provider allows 200 MB).
        poll_interval: the longest pause, in seconds, between two status polls (polls
            start at one second and back off to this).
        max_wait: seconds a ``wait: true`` run polls before it gives up and exits 75
            (the batches go on at the provider; ``--resume`` collects them).
        wait: true polls until every batch has finished; false submits, records and
            exits 75 at once, for a scheduler to come back with ``--resume``.
        endpoint: the ``endpoint`` value of the batch and the ``url`` of each line; by
            default the request path from its ``/v1/`` on (``/v1/chat/completions``).

    """

    max_requests: Annotated[int, Field(ge=1, le=MAX_REQUESTS)] = MAX_REQUESTS
    max_bytes: Annotated[int, Field(ge=1024, le=MAX_BYTES)] = MAX_BYTES
    poll_interval: Annotated[float, Field(gt=0)] = 30.0
    max_wait: Annotated[float, Field(ge=0)] = float(DAY_S)
    wait: bool = True
    endpoint: str | None = None
