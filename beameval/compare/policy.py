"""The gate policy (``--policy GATE.yaml``): the level, the correction, the margins and the pair minimums."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from beameval.config.errors import format_errors
from beameval.config.frozen import Frozen
from beameval.core.errors import ConfigError

__all__ = ["DEFAULT_MAX_DROP_FRACTION", "OK_RATE", "GatePolicy", "ScoreGate", "parse_policy"]

#: The margin of a score the policy does not name: this share of its range (0.01 for [0, 1], 1.0 for BLEU).
DEFAULT_MAX_DROP_FRACTION = 0.01
#: The implicit score of every comparison: 1 when a row is ok, 0 when it failed (CONTRACT "Gating, revised").
OK_RATE = "ok_rate"


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
    """``{alpha, correction, scores: {NAME: {max_drop}}, default_max_drop_fraction, min_pairs, min_group_pairs}``.

    Which scores are gated, and at what margin ``m``:

    * a score named in ``scores``: its ``max_drop``, whether or not its range is known;
    * with no ``scores`` (or no policy), or when ``default_max_drop_fraction`` is set, every
      other score whose range is known: that fraction (default 0.01) of ``max - min``;
      a score of unknown range (a remote metric) is then only reported;
    * ``ok_rate`` always (at 0.01 of its [0, 1] range unless named).

    A judge score gates only when its judge is calibrated in both runs (else it is
    INCONCLUSIVE at best); ``require_calibrated_judges: false`` gates it as any other score.

    ``alpha``, when given, sets the confidence level to ``1 - alpha``; each one-sided test then
    runs at ``a = alpha / 2``. Unknown keys are refused.
    """

    alpha: Annotated[float, Field(gt=0, lt=1)] | None = None
    correction: Literal["holm", "none"] = "holm"
    scores: dict[str, ScoreGate] | None = None
    default_max_drop_fraction: Annotated[float, Field(ge=0, lt=1)] | None = None
    min_pairs: Annotated[int, Field(ge=2)] = 10
    min_group_pairs: Annotated[int, Field(ge=2)] = 30
    require_calibrated_judges: bool = True

    def confidence_level(self, configured: float | None) -> float:
        """``1 - alpha`` when the policy sets alpha, else the runs' ``statistics.confidence_level`` (0.95)."""
        if self.alpha is not None:
            return 1.0 - self.alpha
        return 0.95 if configured is None else configured

    def margin(self, name: str, value_range: tuple[float, float] | None) -> float | None:
        """The margin ``m`` of one score, or None when it is only reported (see the class docstring)."""
        if self.scores is not None and name in self.scores:
            return self.scores[name].max_drop
        if name == OK_RATE:
            value_range = (0.0, 1.0)
        elif self.scores is not None and self.default_max_drop_fraction is None:
            return None
        if value_range is None:
            return None
        fraction = (
            DEFAULT_MAX_DROP_FRACTION if self.default_max_drop_fraction is None else self.default_max_drop_fraction
        )
        return fraction * (value_range[1] - value_range[0])

    def unknown_scores(self, names: list[str]) -> list[str]:
        """Gated names that are not among the compared scores (a typo would pass every release)."""
        return sorted(set(self.scores or {}) - set(names) - {OK_RATE})

    def described(self, source: str | None, confidence_level: float) -> dict[str, Any]:
        """The ``policy`` block of ``comparison.json``: what was asked and the level used."""
        return {
            "source": source,
            "alpha": 1.0 - confidence_level,
            "confidence_level": confidence_level,
            "one_sided_level": (1.0 - confidence_level) / 2.0,
            "correction": self.correction,
            "scores": {name: {"max_drop": gate.max_drop} for name, gate in (self.scores or {}).items()},
            "default_max_drop_fraction": self.default_max_drop_fraction,
            "min_pairs": self.min_pairs,
            "min_group_pairs": self.min_group_pairs,
            "require_calibrated_judges": self.require_calibrated_judges,
        }


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
