"""The page builders as pure functions: escaping, missing fields, no external reference, bounded size."""

from __future__ import annotations

import json
import math
import re

import pytest

from beameval.report import render_comparison_report, render_run_report
from beameval.report.charts import forest_plot, histogram
from beameval.report.html import redact
from beameval.report.sample import SampleInfo

EVIL = '</script><script>alert(1)</script><img src=x onerror="alert(2)">'
#: Anything that would make a browser fetch: a tag's src/href/srcset/action other than "#...", CSS url()/@import.
EXTERNAL = re.compile(r"""<[a-z][^<>]*\s(?:src|href|srcset|action|poster)\s*=(?!\s*["']?#)|url\(|@import""", re.I)


def results(**extra):
    score = {
        "name": "exact-match.exact-match", "count": 3, "nan_count": 1, "mean": 2 / 3, "min": 0.0, "max": 1.0,
        "ci_low": 0.2077, "ci_high": 0.9385, "ci_method": "wilson", "confidence_level": 0.95,
        "histogram": {"bins": [{"lower_bound": 0.0, "upper_bound": 0.5, "count": 1},
                               {"lower_bound": 0.5, "upper_bound": 1.0, "count": 2}]},
    }  # fmt: skip
    return {
        "status": "completed",
        "counts": {"rows": 4, "ok": 3, "errors": 1},
        "aggregate_scores": {"scores": [score]},
        "config": {"target": {"model": {"name": "m", "api_key_env": "OPENAI_API_KEY", "api_key": "sk-secret"}}},
        **extra,
    }


def rows():
    return [
        {"row_index": 0, "status": "ok", "item": json.dumps({"q": EVIL, "answer": "a"}), "output_text": EVIL,
         "exact-match.exact-match": 1.0, "error": None},
        {"row_index": 1, "status": "error", "item": "not json {", "output_text": None,
         "exact-match.exact-match": math.nan, "error": f"metric failed: {EVIL}"},
    ]  # fmt: skip


def test_data_is_escaped_everywhere():
    page = render_run_report(results(), rows())
    assert EVIL not in page
    assert page.count("<script>") == 1  # the page's own script, and nothing from data
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "sk-secret" not in page and "OPENAI_API_KEY" in page  # the variable's name is fine, a key never


def test_no_external_reference():
    for page in (
        render_run_report(results(), rows()),
        render_comparison_report({"verdict": "GO", "scores": []}, [{"key": "x", "baseline_output": EVIL}]),
    ):
        assert not EXTERNAL.search(page), EXTERNAL.search(page)
        assert "default-src 'none'" in page


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"status": "completed"},
        {"status": "completed", "counts": {}, "aggregate_scores": {"scores": [{"name": "f1.f1"}]}, "usage": {}},
        {"aggregate_scores": {"scores": [{"name": "x", "mean": None, "histogram": {"bins": []}}]}, "groups": [{}]},
        results(groups=[{"by": "cat", "value": None, "counts": {"rows": 1}, "scores": [{"name": "other"}]}]),
        results(usage={"requests": 2, "latency_ms": {"count": 2, "percentiles": {"p50": 3.0}}, "cache": {"hits": 1}}),
        results(provenance={"models_seen": [{"model": "m", "count": 3}], "run_id": "abc"}),
    ],
)
def test_older_or_partial_results_render(document):
    page = render_run_report(document, [])
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_headline_numbers_match_the_results():
    page = render_run_report(
        results(provenance={"models_seen": [{"model": "gpt-x", "system_fingerprint": "fp1", "count": 3}]}), rows()
    )
    assert ">0.6667<" in page and "95% CI" in page and "[0.2077, 0.9385]" in page and "n = 3" in page
    assert "model: gpt-x, system_fingerprint: fp1, count: 3" in page


def test_sample_note_and_size_bound_at_the_page_budget():
    long = "word " * 4000  # 20,000 characters per field
    many = [
        {"row_index": i, "status": "ok", "item": json.dumps({"q": long}), "output_text": long,
         "exact-match.exact-match": 1.0, "error": None, "judge_reply": long}
        for i in range(2000)
    ]  # fmt: skip
    info = SampleInfo(1_000_000, 0, 0, 0, 0, 2000, 2000, 0)
    page = render_run_report(results(), many, sample=info)
    assert "This page holds 2,000 of the run's 1,000,000 rows" in page
    assert len(page.encode()) < 5_000_000
    assert "judge reply" in page


def test_histogram_bars_follow_the_bins():
    svg = histogram("s", results()["aggregate_scores"]["scores"][0], width=340, height=150)
    heights = [float(h) for h in re.findall(r'<rect class="bar"[^>]* height="([\d.]+)"', svg)]
    plot_h = 150 - 8 - 22
    assert heights == [pytest.approx(plot_h / 2, abs=0.05), pytest.approx(plot_h, abs=0.05)]


def test_forest_plot_places_delta_interval_and_gate():
    scores = [{"name": "a", "delta": -0.05, "ci_low": -0.08, "ci_high": -0.02, "verdict": "NO-GO"}]
    svg = forest_plot(scores, {"a": 0.03}, width=980)
    # One scale per line, zero centred: reach = 0.08 * 1.15; x = 250 + (v + reach) / (2 * reach) * 470.
    reach = 0.08 * 1.15

    def x(v):
        return 250 + (v + reach) / (2 * reach) * 470

    point = float(re.search(r'<circle class="pt NO-GO" cx="([\d.]+)"', svg).group(1))
    gate = float(re.search(r'<line class="gate" x1="([\d.]+)"', svg).group(1))
    low, high = (
        float(v) for v in re.search(r'<line class="whisker" x1="([\d.]+)" y1="[\d.]+" x2="([\d.]+)"', svg).groups()
    )
    assert (point, gate, low, high) == pytest.approx((x(-0.05), x(-0.03), x(-0.08), x(-0.02)), abs=0.06)


def test_redact_masks_secret_values_and_url_credentials():
    assert redact({"api_key": "sk-1", "api_key_env": "K", "token": "t", "prompt_tokens": 5}) == {
        "api_key": "(hidden)",
        "api_key_env": "K",
        "token": "(hidden)",
        "prompt_tokens": 5,
    }
    assert redact({"url": "https://u:p@host/v1?key=abc&x=1"}) == {"url": "https://host/v1?key=(hidden)&x=1"}


def test_comparison_page_defaults_every_score_to_a_zero_gate():
    page = render_comparison_report(
        {"verdict": "GO", "scores": [{"name": "a", "delta": 0.01, "ci_low": 0.0, "ci_high": 0.02, "verdict": "GO"}]},
        [],
    )
    assert "max drop 0.0000" in page and "1 gated score; none dropped beyond its gate." in page
