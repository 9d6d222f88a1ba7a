"""The config file's schema (pydantic models); loading files is the pipeline's job.

The package exports the section types that metrics and the inference engine build on;
the whole file's model (``EvalConfig``, ``parse_config``) is in ``beameval.config.schema``,
which needs the metric registry, so importing it here would make every metric import
every other one through this package.
"""

from beameval.config.endpoints import AgentTarget, ModelTarget, TargetConfig
from beameval.config.inference import InferenceParams
from beameval.config.params import Params, ReasoningParams

__all__ = ["AgentTarget", "InferenceParams", "ModelTarget", "Params", "ReasoningParams", "TargetConfig"]
