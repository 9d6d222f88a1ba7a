"""The Beam transforms, one stage per module: read, generate, score, aggregate, write."""

__all__ = ["NAMESPACE"]

NAMESPACE = "evaluator"
"""The one namespace of every Beam metric the stages report (counters, distributions, gauges)."""
