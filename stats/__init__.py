"""Beam-free aggregation core: mergeable, bounded-memory score statistics that a thin CombineFn delegates to.

* :mod:`stats.summary`: :class:`ScoreAccumulator` and ``add`` / ``merge`` / ``result``
  for range scores (exact up to 100k distinct values, DDSketch beyond).
* :mod:`stats.rubric`: :class:`RubricAccumulator` for LLM-judge rubric scores.
* :mod:`stats.corpus`: :func:`corpus_result` for corpus-level scores.

Nothing in this package imports apache_beam; results are plain JSON-ready dicts.
"""

from __future__ import annotations

from stats import corpus, rubric, summary
from stats.corpus import corpus_result
from stats.rubric import RubricAccumulator
from stats.sketch import DDSketch
from stats.summary import MAX_EXACT_DISTINCT, ScoreAccumulator

__all__ = [
    "MAX_EXACT_DISTINCT",
    "DDSketch",
    "RubricAccumulator",
    "ScoreAccumulator",
    "corpus",
    "corpus_result",
    "rubric",
    "rubric_result",
    "score_result",
    "summary",
]

score_result = summary.result
"""``score_result(acc, name)``: the range aggregate dict of a :class:`ScoreAccumulator`."""

rubric_result = rubric.result
"""``rubric_result(acc, name, rubric)``: the rubric aggregate dict of a :class:`RubricAccumulator`."""
