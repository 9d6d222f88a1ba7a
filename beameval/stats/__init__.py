"""Beam-free aggregation core: mergeable, bounded-memory score statistics that a thin CombineFn delegates to.

* :mod:`beameval.stats.summary`: :class:`ScoreAccumulator` and ``add`` / ``merge`` / ``result``
  for range scores (exact up to 100k distinct values, DDSketch beyond).
* :mod:`beameval.stats.rubric`: the rubric form of an aggregate (label distribution and mode).
* :mod:`beameval.stats.corpus`: :func:`corpus_result` for corpus-level scores.

Nothing in this package imports apache_beam; results are plain JSON-ready dicts.
"""
