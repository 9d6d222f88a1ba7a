"""The config file's schema (pydantic models); loading files is the pipeline's job."""

from beameval.config.endpoints import AgentTarget, ModelTarget, TargetConfig
from beameval.config.params import InferenceParams, Params, ReasoningParams
from beameval.config.schema import DatasetConfig, EvalConfig, parse_config

__all__ = [
    "AgentTarget",
    "DatasetConfig",
    "EvalConfig",
    "InferenceParams",
    "ModelTarget",
    "Params",
    "ReasoningParams",
    "TargetConfig",
    "parse_config",
]
