"""MarkDecided: ``--decide``'s wave filter: rows outside the waves evaluated so far become ``skipped``, unsent.

Each wave of ``--decide`` is one Beam job over the whole dataset (``pipeline.decide``): the
rows of this and earlier waves go on to the target (earlier ones answered from the journal),
every other row is marked skipped here, before anything is rendered or sent, and reaches
``rows/`` as ``skipped`` like a row a budget stopped (not in ``errors/``, not in the aggregates).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from beameval.core.records import InputRow, RowFailure

__all__ = ["DECIDED", "DECIDED_MESSAGE", "MarkDecided"]

#: The reason given for the rows a decision made unnecessary (``skip_reason`` in rows/).
DECIDED = "decided"
#: The ``error`` text of such a row in rows/ (``skip_reason`` is derived from it).
DECIDED_MESSAGE = "decided: not sent, the release verdict was certain before this row's turn (--decide)"


class MarkDecided:
    """InputRow -> the row itself when it is in ``evaluated``, else the row skipped (``RowFailure.skipped``).

    Args:
        evaluated: the ``row_index`` of every row of the waves so far.
    """

    def __init__(self, evaluated: Iterable[int]) -> None:
        self._evaluated = frozenset(int(index) for index in evaluated)

    def __call__(self, row: InputRow) -> InputRow:
        if row.row_index in self._evaluated or row.failure is not None:
            return row  # an unreadable row fails as it would in any run
        return dataclasses.replace(row, failure=RowFailure("sample_generation", [DECIDED_MESSAGE], skipped=True))
