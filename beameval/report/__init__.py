"""Self-contained HTML reports of a run and of a comparison (pure: no Beam, no I/O).

``render_run_report`` and ``render_comparison_report`` turn ``results.json`` /
``comparison.json`` plus a bounded sample of rows (``RowSampler``) into one HTML file
that needs no network: style, script and SVG charts are inline. ``pipeline.report``
reads the files and writes the page.
"""

from beameval.report.compare_page import render_comparison_report
from beameval.report.run_page import render_run_report
from beameval.report.sample import DEFAULT_BUDGET, FailureBreakdown, Reservoir, RowSampler, SampleInfo

__all__ = [
    "DEFAULT_BUDGET",
    "FailureBreakdown",
    "Reservoir",
    "RowSampler",
    "SampleInfo",
    "render_comparison_report",
    "render_run_report",
]
