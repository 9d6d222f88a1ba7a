"""Endpoint handlers: build each target kind's requests and read its replies; the engine stays kind-agnostic."""

from beameval.inference.targets.agent import AgentHandler
from beameval.inference.targets.base import TargetHandler, endpoint_key, key_fingerprint
from beameval.inference.targets.factory import make_handler
from beameval.inference.targets.model import ModelHandler, as_request

__all__ = [
    "AgentHandler",
    "ModelHandler",
    "TargetHandler",
    "as_request",
    "endpoint_key",
    "key_fingerprint",
    "make_handler",
]
