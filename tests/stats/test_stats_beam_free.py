"""The stats package must import and work with apache_beam unavailable."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib.abc
import sys


class BlockBeam(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "apache_beam" or name.startswith("apache_beam."):
            raise ImportError(f"blocked import of {name}")
        return None


sys.meta_path.insert(0, BlockBeam())
for name in [m for m in sys.modules if m == "apache_beam" or m.startswith("apache_beam.")]:
    del sys.modules[name]

import stats
import stats.corpus
import stats.distribution
import stats.fields
import stats.moments
import stats.rubric
import stats.sketch
import stats.summary

acc = stats.summary.ScoreAccumulator().add_all([0, 1, 1, float("nan")])
assert acc.result("x")["percentiles"]["p40"] == 0.6
assert stats.rubric.rubric_result(acc.result("r"), {"a": 2}, [("a", 1.0, None)])["mode_category"] == "a"
assert stats.corpus.corpus_result("c", 1.0)["count"] == 1
loaded = sorted(m for m in sys.modules if m.startswith("apache_beam"))
assert not loaded, loaded
print("beam-free ok")
"""


def test_stats_imports_without_apache_beam() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "beam-free ok" in proc.stdout
