"""The gate policy (``--policy GATE.yaml``): the level, the correction and each gated score's allowed drop."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from beameval.config.errors import format_errors
from beameval.config.frozen import Frozen
from beameval.core.errors import ConfigError

__all__ = ["GatePolicy", "ScoreGate", "parse_policy"]


class ScoreGate(Frozen):
    """One gated score: the largest drop (candidate below baseline, in the score's units) that still passes."""

    max_drop: Annotated[float, Field(ge=0)] = 0.0

    @field_validator("max_drop")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class GatePolicy(Frozen):
    """``{alpha, correction, scores: {NAME: {max_drop}}}``; unknown keys are refused.

    ``scores`` left out gates every compared score with ``max_drop: 0`` (as with no
    policy at all); an empty mapping gates none, so every score is only reported.
    """

    alpha: Annotated[float, Field(gt=0, lt=1)] = 0.05
    correction: Literal["holm", "none"] = "holm"
    scores: dict[str, ScoreGate] | None = None

    def gates(self, names: list[str]) -> dict[str, float]:
        """``{score name: max_drop}`` for the gated scores among ``names``, in ``names`` order."""
        if self.scores is None:
            return {name: 0.0 for name in names}
        return {name: self.scores[name].max_drop for name in names if name in self.scores}

    def unknown_scores(self, names: list[str]) -> list[str]:
        """Gated names that are not among the compared scores (a typo would pass every release)."""
        return sorted(set(self.scores or {}) - set(names))


def parse_policy(text: str, source: str) -> GatePolicy:
    """Validate a policy file's text (YAML or JSON).

    Args:
        text: the file's content.
        source: where it came from, for messages (e.g. ``policy file 'gate.yaml'``).

    Returns:
        The policy.

    Raises:
        ConfigError: the text is not YAML, not a mapping, or breaks the schema.
    """
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML/JSON: {' '.join(str(exc).split())}.") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source} must be a mapping such as "
            f"{{alpha: 0.05, correction: holm, scores: {{NAME: {{max_drop: 0.02}}}}}}, got {type(data).__name__}."
        )
    try:
        return GatePolicy.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source} is invalid: {format_errors(exc, model=GatePolicy)}") from None
