"""The ``decide:`` section: the seeded evaluation order and the wave size of ``--decide`` (docs/STATISTICS.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from beameval.config.frozen import Frozen

__all__ = ["DecideConfig"]


class DecideConfig(Frozen):
    """How ``--decide`` walks the dataset: rows in a random order fixed by ``seed``, ``wave_rows`` at a time.

    The order depends on the seed and each row's ``row_index`` only (not on the runner, the
    number of workers or how the files are split), so a rerun with the same seed evaluates
    the same rows first and its earlier waves come from the journal.
    """

    seed: Annotated[int, Field(ge=0)] = 0
    wave_rows: Annotated[int, Field(ge=1)] = 200
