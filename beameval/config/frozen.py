"""The frozen base every config model shares: unknown keys are refused, values never change."""

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """A config section: unknown keys are refused (a typo never passes silently), values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
