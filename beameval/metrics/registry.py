"""Looking up metric types by name: every built-in metric module is imported here, once.

Metric modules register themselves with ``@register`` (``beameval.metrics.base``); this
module imports them all (``beameval.metrics.builtin``) before answering, so a lookup never
depends on what else happened to be imported first.
"""

from __future__ import annotations

from typing import Any

import beameval.metrics.builtin  # noqa: F401  (imported for its side effect: every built-in metric registers)
from beameval.core.errors import ConfigError
from beameval.core.suggest import closest
from beameval.metrics.base import REGISTRY, Metric, MetricConfig

__all__ = ["config_model", "metric_class", "metric_types", "resolve"]


def metric_types() -> list[str]:
    """Every registered metric type name, sorted."""
    return sorted(REGISTRY)


def config_model(type_name: str) -> type[MetricConfig]:
    """The config class for a metric type.

    Raises:
        ConfigError: the type is unknown; the message lists the valid ones.
    """
    try:
        return REGISTRY[type_name].config_class
    except KeyError:
        meant = closest(str(type_name), metric_types())
        hint = f" Did you mean {meant!r}?" if meant else ""
        valid = ", ".join(metric_types())
        raise ConfigError(f"unknown metric type {type_name!r}; valid types are: {valid}.{hint}") from None


def metric_class(type_name: str) -> type[Metric[Any]]:
    """The metric class registered under ``type_name`` (a KeyError when unknown)."""
    return REGISTRY[type_name]


def resolve(config: MetricConfig, key: str | None = None) -> Metric[Any]:
    """Build the runtime metric for a validated config; ``key`` is its metric key in the run."""
    metric = REGISTRY[config.type](config)
    if key is not None:
        metric.key = key
    return metric
