"""The ``statistics:`` section: confidence level, the clustering field and the breakdown fields."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from beameval.config.frozen import Frozen

__all__ = ["StatisticsConfig", "field_path"]

#: A dotted path into the row: non-empty segments without whitespace, e.g. ``meta.source``.
_PATH = re.compile(r"[^.\s]+(\.[^.\s]+)*")


def field_path(value: str) -> tuple[str, ...]:
    """Split a dotted field path into its segments.

    Args:
        value: the path as written in the config, e.g. ``"meta.source"``.

    Returns:
        The segments, e.g. ``("meta", "source")``.

    Raises:
        ValueError: the path is empty, has an empty segment or contains whitespace.

    """
    if not isinstance(value, str) or not _PATH.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a field path; write a row field name, or a dotted path into nested "
            "fields such as 'category' or 'meta.source'"
        )
    return tuple(value.split("."))


class StatisticsConfig(Frozen):
    """How intervals are computed and which breakdowns are reported (docs/STATISTICS.md).

    Attributes:
        confidence_level: the coverage of every interval, strictly between 0 and 1.
        cluster_by: a row field whose distinct values are the clusters of the clustered
            standard error (questions about one passage, one document, one user), or None.
        group_by: row fields to break every statistic down by, in report order.

    """

    confidence_level: Annotated[float, Field(gt=0, lt=1)] = 0.95
    cluster_by: str | None = None
    group_by: list[str] = Field(default_factory=list)

    @field_validator("cluster_by")
    @classmethod
    def _cluster_path(cls, value: str | None) -> str | None:
        if value is not None:
            field_path(value)
        return value

    @field_validator("group_by")
    @classmethod
    def _group_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            field_path(path)
        return value

    @model_validator(mode="after")
    def _distinct_groups(self) -> StatisticsConfig:
        repeated = sorted({path for path in self.group_by if self.group_by.count(path) > 1})
        if repeated:
            raise ValueError(f"group_by lists {', '.join(map(repr, repeated))} more than once; list each field once")
        return self
