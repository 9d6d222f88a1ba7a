"""A small, fast OpenAI-compatible stub server with fault injection, for tests and benchmarks."""

from beameval.testserver.faults import FaultConfig, Rule

__all__ = ["FaultConfig", "Rule"]
