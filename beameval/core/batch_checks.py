"""Row checks for a whole Arrow batch at once, so the rows of a clean Parquet row group skip the per-row walk.

``sanitize.check_row`` walks every value of every row (nesting depth, text length, lone
surrogates). For a Parquet row group the same facts follow from the schema and one
vectorised pass per text column: a column's type fixes how deep its values nest, Arrow
computes the longest text, and Arrow text is UTF-8, which cannot hold a lone surrogate
(Python's decoder refuses an encoded one). A batch that passes holds no row that
``check_row`` would fail or change; any other batch (nested or dictionary-encoded text
columns, a long value) is checked row by row as before.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from beameval.core import sanitize

__all__ = ["arrow_rows_clean"]


def arrow_rows_clean(table: pa.Table) -> bool:
    """Whether every row of ``table`` passes ``check_row`` unchanged, decided from its schema and columns.

    Returns:
        True when no column is nested, dictionary-encoded or a string view (a row is then
        one level deep, within ``sanitize.MAX_NESTING``, and Arrow measures its text) and no text
        value is longer than ``sanitize.MAX_CELL_CHARS``; False when the rows must be checked one by one.
    """
    for column, field in zip(table.columns, table.schema, strict=True):
        kind = field.type
        if pa.types.is_nested(kind) or pa.types.is_dictionary(kind) or pa.types.is_string_view(kind):
            return False
        if (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and len(column):
            longest = pc.max(pc.utf8_length(column)).as_py()
            if longest is not None and longest > sanitize.MAX_CELL_CHARS:  # read per call, as check_row does
                return False
    return True
