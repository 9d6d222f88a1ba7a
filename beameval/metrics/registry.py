"""Looking up metric types by name: the built-in metrics, and those installed packages add.

Metric modules register themselves with ``@register`` (``beameval.metrics.base``); this
module imports them all (``beameval.metrics.builtin``) before answering, so a lookup never
depends on what else happened to be imported first.

A package of the user's own adds metric types through the entry-point group
``beameval.metrics`` (``ENTRY_POINT_GROUP``): each entry point's name is the type used in
YAML and its object a ``Metric`` subclass with its ``config_class`` (the API is
``beameval.metrics.api``). They are loaded on the first lookup, in the driver and in every
worker alike, so aggregates, intervals, groups and the gate treat them as built-ins. A
plugin that fails to load is reported when its type is used, naming the package.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

import beameval.metrics.builtin  # noqa: F401  (imported for its side effect: every built-in metric registers)
from beameval.core.errors import ConfigError
from beameval.core.suggest import closest
from beameval.metrics.base import REGISTRY, Metric, MetricConfig

__all__ = ["ENTRY_POINT_GROUP", "config_model", "metric_class", "metric_types", "resolve"]

#: The entry-point group a package lists its metric classes in.
ENTRY_POINT_GROUP = "beameval.metrics"
#: Plugin types that could not be loaded, with the message to give when one is used.
_BROKEN: dict[str, str] = {}
_loaded = False


def _load_plugins() -> None:
    """Register every installed package's metric types, once per process."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        problem = _register_plugin(entry)
        if problem is not None:
            _BROKEN[entry.name] = problem


def _register_plugin(entry: EntryPoint) -> str | None:
    """Register one entry point's metric class; the message for a broken one, else None."""
    where = f"metric type {entry.name!r} from the package {entry.dist.name if entry.dist else '?'!r} ({entry.value})"
    try:
        cls = entry.load()
    except Exception as exc:  # noqa: BLE001 - any import error of someone else's package is reported, not raised
        return f"{where} could not be imported: {type(exc).__name__}: {exc}. Fix or reinstall that package."
    config_class = getattr(cls, "config_class", None)
    if not (isinstance(cls, type) and issubclass(cls, Metric)) or not (
        isinstance(config_class, type) and issubclass(config_class, MetricConfig)
    ):
        return f"{where} is not a beameval.metrics.api.Metric subclass with a config_class derived from MetricConfig."
    registered = REGISTRY.get(entry.name)
    if registered is not None and registered is not cls:
        return f"{where} has the name of a metric type that already exists; give it another entry-point name."
    REGISTRY[entry.name] = cls
    return None


def metric_types() -> list[str]:
    """Every registered metric type name, sorted."""
    _load_plugins()
    return sorted(REGISTRY)


def config_model(type_name: str) -> type[MetricConfig]:
    """The config class for a metric type.

    Raises:
        ConfigError: the type is unknown (the message lists the valid ones) or its package failed to load.
    """
    _load_plugins()
    if type_name in _BROKEN:
        raise ConfigError(_BROKEN[type_name])
    try:
        return REGISTRY[type_name].config_class
    except KeyError:
        meant = closest(str(type_name), metric_types())
        hint = f" Did you mean {meant!r}?" if meant else ""
        valid = ", ".join(metric_types())
        raise ConfigError(f"unknown metric type {type_name!r}; valid types are: {valid}.{hint}") from None


def metric_class(type_name: str) -> type[Metric[Any]]:
    """The metric class registered under ``type_name`` (a KeyError when unknown)."""
    _load_plugins()
    return REGISTRY[type_name]


def resolve(config: MetricConfig, key: str | None = None) -> Metric[Any]:
    """Build the runtime metric for a validated config; ``key`` is its metric key in the run."""
    _load_plugins()
    metric = REGISTRY[config.type](config)
    if key is not None:
        metric.key = key
    return metric
