"""Beam-free aggregation core: mergeable, bounded-memory score statistics that a thin CombineFn delegates to.

* :mod:`beameval.stats.summary`: :class:`ScoreAccumulator` and ``add`` / ``merge`` / ``result``
  for range scores (exact up to 100k distinct values, DDSketch beyond).
* :mod:`beameval.stats.rubric`: the rubric form of an aggregate (label distribution and mode).
* :mod:`beameval.stats.corpus`: :func:`corpus_result` for corpus-level scores.
* :mod:`beameval.stats.intervals`: Wilson and Student-t intervals, the naive uncertainty fields.
* :mod:`beameval.stats.clusters`: the CR1 clustered standard error from per-cluster sums (two stages).
* :mod:`beameval.stats.repeats`: per-row means of repeated samples, within-row variance, pass@k, pass^k.
* :mod:`beameval.stats.breakdown`: the scopes (run, ``group_by`` groups) and cluster of a row.
* :mod:`beameval.stats.uncertainty`: the final interval of each score, and the ordered groups.

Nothing in this package imports apache_beam; results are plain JSON-ready dicts.
"""
