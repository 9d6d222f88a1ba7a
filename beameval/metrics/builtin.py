"""Imports every built-in metric module so that each registers itself."""

from beameval.metrics import (  # noqa: F401
    bleu,
    exact_match,
    f1,
    llm_judge,
    number_check,
    remote,
    retrieval,
    rouge,
    string_check,
    tool_calling,
)
