"""The API a metric of one's own is written against: what every built-in metric implements.

A metric type is a ``Metric`` subclass and its config class (a ``MetricConfig`` subclass:
its fields are the keys under ``metrics:`` in YAML), listed by an installed package in the
entry-point group ``beameval.metrics`` under the type's name. docs/METRICS.md, "Metrics of
your own", walks through it; ``examples/custom_metric`` is a complete package.

What a metric must do: ``output_names`` (the per-row scores, reported as
``<metric key>.<output>``), ``score(ctx)`` (one float per output for a row; NaN when the
row has no score; raise ``MetricError`` for a row that cannot be scored, which becomes an
error record). Optional: ``value_range`` or ``output_ranges`` (intervals are clipped to it
and a comparison's default margin is 1% of it), ``label_outputs``, ``detail_names`` and
``row_details``, and the corpus methods. Templates (``Template``) render over
``ctx.template_context`` exactly as the built-ins' do.
"""

from beameval.core.errors import MetricError, TemplateError
from beameval.core.templates import Template
from beameval.metrics.base import CANDIDATE_DEFAULT, Metric, MetricConfig, MetricContext

__all__ = ["CANDIDATE_DEFAULT", "Metric", "MetricConfig", "MetricContext", "MetricError", "Template", "TemplateError"]
