"""The one place that turns a target config into its handler (the only branch on target kind)."""

from __future__ import annotations

from beameval.config.endpoints import TargetConfig
from beameval.config.params import Params
from beameval.inference.targets.agent import AgentHandler
from beameval.inference.targets.base import TargetHandler
from beameval.inference.targets.model import ModelHandler
from beameval.inference.targets.retrieval import EmbeddingsHandler

__all__ = ["make_handler"]


def make_handler(target: TargetConfig, params: Params, api_key: str | None) -> TargetHandler:
    """Build the handler for ``target``.

    Args:
        target: ``target:`` from the config (exactly one of ``model`` / ``agent``).
        params: the run parameters (system prompt, inference, reasoning, structured output).
        api_key: the resolved key (never the env-var name), or None for no Authorization.

    Returns:
        A ``ModelHandler``, an ``AgentHandler``, or a retrieval target's ``EmbeddingsHandler``.

    Raises:
        ConfigError: a JSONPath or a structured-output schema is invalid.
        TemplateError: the agent body template has a syntax error.

    """
    if target.model is not None:
        return ModelHandler(target.model, params, api_key)
    if target.agent is not None:
        return AgentHandler(target.agent, api_key)
    if target.retrieval is not None:  # the per-row request: the query's embedding (transforms.retrieval)
        return EmbeddingsHandler(target.retrieval.embeddings, api_key)
    raise ValueError("the target config sets none of model, agent, retrieval")
