"""The multi-target page and results document: groups get their own leaderboard, names are escaped and linked."""

from __future__ import annotations

from typing import Any

from beameval.report.leaderboard_page import render_leaderboard_report
from pipeline.leaderboard import build_leaderboard, format_leaderboard


def _score(name: str, mean: float, count: int) -> dict[str, Any]:
    return {"name": name, "mean": mean, "ci_low": mean - 0.1, "ci_high": mean + 0.1, "count": count, "sum": 1.0}


def _results(mean: float) -> dict[str, Any]:
    return {
        "status": "completed",
        "counts": {"rows": 10, "ok": 10, "errors": 0},
        "aggregate_scores": {"scores": [_score("em", mean, 10)]},
        "groups": [{"by": "topic", "value": "<geo>", "counts": {}, "scores": [_score("em", mean / 2, 4)]}],
    }


def test_the_leaderboard_copies_each_targets_statistics_and_groups() -> None:
    doc = build_leaderboard({"a": _results(0.8), "b": _results(0.6)}, {"targets": []}, {"wall_time_s": 1.5})
    assert doc["targets"] == ["a", "b"]
    first = doc["leaderboard"][0]
    assert first["scores"] == [{"name": "em", "mean": 0.8, "ci_low": 0.8 - 0.1, "ci_high": 0.8 + 0.1, "count": 10}]
    assert first["groups"] == [{"by": "topic", "value": "<geo>", "scores": [{**first["scores"][0], "mean": 0.4,
                                "ci_low": 0.4 - 0.1, "ci_high": 0.4 + 0.1, "count": 4}]}]  # fmt: skip
    text = format_leaderboard(doc, None)
    rows = [line.split() for line in text.splitlines()[4:]]
    assert rows == [
        ["a", "em", "10", "0.8000", "[0.7000,", "0.9000]"],
        ["b", "em", "10", "0.6000", "[0.5000,", "0.7000]"],
    ]


def test_the_page_has_a_table_per_group_links_and_escaped_values() -> None:
    doc = build_leaderboard({"a": _results(0.8), "b-2": _results(0.6)}, {}, {"wall_time_s": 1.0})
    comparison = {
        "correction": {"method": "holm", "comparisons": 1, "gated_scores": 2},
        "comparisons": [{"target": "b-2", "verdict": "NO-GO", "message": "NO-GO: <em> dropped", "scores": [
            {"name": "em", "n_paired": 10, "delta": -0.2, "ci_low": -0.3, "ci_high": -0.1, "verdict": "NO-GO"}]}],
    }  # fmt: skip
    page = render_leaderboard_report(doc, comparison)
    assert 'href="targets/a/report.html"' in page and 'href="targets/b-2/report.html"' in page
    assert "Group topic = &lt;geo&gt;" in page and "<geo>" not in page
    assert "0.4000" in page and "[0.3000, 0.5000]" in page  # the group's mean and interval
    assert "NO-GO: &lt;em&gt; dropped" in page and "holm across the 2 gated scores of 1 comparisons" in page
