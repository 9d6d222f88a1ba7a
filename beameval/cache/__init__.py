"""The response store: the cache key, the per-run journal, store entries and the store's maintenance.

Beam-free: files are reached through a small ``Files`` interface (``beameval.cache.files``)
that the Beam layer implements on ``FileSystems``; local paths work without it.
"""
