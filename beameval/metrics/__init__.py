"""Metrics: one module per metric type, registered by name in ``beameval.metrics.base``."""
