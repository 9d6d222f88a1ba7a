"""The evaluator's Beam-free library: config schema, templates, records, metrics, statistics, inference.

Nothing here imports ``apache_beam``, ``transforms`` or ``pipeline``: those layers build on
this one (library <- transforms <- pipeline), so everything in it can be tested alone.
"""
