"""``targets:``: several named model or agent targets evaluated in one run (CONTRACT "Several targets in one run").

Each entry is a ``target:`` with a ``name`` and, optionally, its own request settings
(``params:`` keys that concern sending: concurrency, retries, timeouts). A multi-target run
evaluates each entry as the single-target config :func:`single_target` makes of it, so
``OUT_DIR/targets/NAME/`` is exactly what a run of that config writes.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field, field_validator

from beameval.config.endpoints import TargetConfig
from beameval.config.frozen import Frozen

__all__ = ["PER_TARGET_PARAMS", "NamedTarget", "TargetParams", "check_target_names"]

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
#: The ``params:`` keys a target may set for itself: how its requests are sent, never what is evaluated.
PER_TARGET_PARAMS = ("parallelism", "max_retries", "request_timeout", "max_retry_wait")


class TargetParams(Frozen):
    """A target's own request settings; unset ones come from the top-level ``params:``."""

    parallelism: Annotated[int, Field(ge=1, le=4096)] | None = None
    max_retries: Annotated[int, Field(ge=0, le=100)] | None = None
    request_timeout: Annotated[float, Field(gt=0)] | None = None
    max_retry_wait: Annotated[float, Field(ge=0, le=86400)] | None = None

    def overrides(self) -> dict[str, Any]:
        """The settings this target sets, to lay over the top-level ``params:``."""
        return self.model_dump(exclude_none=True)


class NamedTarget(TargetConfig):
    """One entry of ``targets:``: a name (its folder under ``OUT_DIR/targets/``), the endpoint, its own settings."""

    name: str
    params: TargetParams = TargetParams()

    @field_validator("name")
    @classmethod
    def _folder_name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError(
                f"target name {name!r} must be letters, digits, '_' and '-' only (it names the folder "
                "OUT_DIR/targets/NAME/)"
            )
        return name

    def as_target(self) -> TargetConfig:
        """The entry as a single-target run's ``target:``."""
        return TargetConfig(**{kind: getattr(self, kind) for kind in TargetConfig.model_fields})


def check_target_names(targets: list[NamedTarget]) -> None:
    """Names are unique, and there is at least one target.

    Raises:
        ValueError: an empty list or a repeated name.
    """
    if not targets:
        raise ValueError("targets must list at least one target ({name: NAME, model: {...}})")
    names = [target.name for target in targets]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"target names must be unique; repeated: {repeated}")
