"""Metrics: one module per metric type, registered by name in ``metrics.base``."""
