"""The page builders as pure functions: escaping, missing fields, no external reference, bounded size."""

from __future__ import annotations

import json
import math
import re

import pytest

from beameval.report import render_comparison_report, render_run_report
from beameval.report.charts import forest_plot, histogram
from beameval.report.compare_page import gate_thresholds
from beameval.report.html import pval, redact
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
    request = json.dumps({"messages": [{"role": "system", "content": long}, {"role": "user", "content": long}]})
    reply = json.dumps({"text": long, "model": "j", "request": request})
    many = [
        {"row_index": i, "status": "ok", "item": json.dumps({"q": long}), "output_text": long,
         "exact-match.exact-match": 1.0, "error": None, "request": request, "llm-judge.reply": reply}
        for i in range(2000)
    ]  # fmt: skip
    info = SampleInfo(1_000_000, 0, 0, 0, 0, 2000, 2000, 0)
    page = render_run_report(results(), many, sample=info)
    assert "This page holds 2,000 of the run's 1,000,000 rows" in page
    assert len(page.encode()) < 5_000_000
    assert page.count(">judge llm-judge (j)<") == 2000 and page.count(">judge llm-judge · system<") == 2000


def test_histogram_bars_follow_the_bins():
    svg = histogram("s", results()["aggregate_scores"]["scores"][0], width=340, height=150)
    heights = [float(h) for h in re.findall(r'<rect class="bar"[^>]* height="([\d.]+)"', svg)]
    plot_h = 150 - 18 - 24  # the top margin holds the mean's label
    assert heights == [pytest.approx(plot_h / 2, abs=0.05), pytest.approx(plot_h, abs=0.05)]


def test_forest_plot_puts_every_score_on_one_axis_with_ticks_zero_and_margins():
    scores = [
        {"name": "a", "delta": -0.05, "ci_low": -0.08, "ci_high": -0.02, "verdict": "NO-GO"},
        {"name": "b", "delta": 0.01, "ci_low": -0.01, "ci_high": 0.03, "verdict": "GO"},
    ]
    svg = forest_plot(scores, {"a": 0.03, "b": 0.02}, width=980)
    # One axis over every value, margin and zero: [-0.08, 0.03] padded by 8% of its span each side.
    low, high = -0.08 - 0.11 * 0.08, 0.03 + 0.11 * 0.08

    def x(v):
        return 230 + (v - low) / (high - low) * (980 - 230 - 250)

    points = [float(v) for v in re.findall(r'<circle class="pt [A-Z-]+" cx="([\d.]+)"', svg)]
    gates = [float(v) for v in re.findall(r'<line class="gate" x1="([\d.]+)"', svg)]
    zero = float(re.search(r'<line class="zero" x1="([\d.]+)"', svg).group(1))
    whiskers = [
        tuple(map(float, m)) for m in re.findall(r'<line class="whisker" x1="([\d.]+)" y1="[\d.]+" x2="([\d.]+)"', svg)
    ]
    assert points == pytest.approx([x(-0.05), x(0.01)], abs=0.06)
    assert gates == pytest.approx([x(-0.03), x(-0.02)], abs=0.06)
    assert zero == pytest.approx(x(0.0), abs=0.06)
    assert whiskers == [pytest.approx((x(-0.08), x(-0.02)), abs=0.06), pytest.approx((x(-0.01), x(0.03)), abs=0.06)]
    ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', svg)
    assert ticks == ["-0.08", "-0.06", "-0.04", "-0.02", "0.00", "0.02"]  # steps of 0.02 inside the padded range


def test_redact_masks_secret_values_and_url_credentials():
    assert redact({"api_key": "sk-1", "api_key_env": "K", "token": "t", "prompt_tokens": 5}) == {
        "api_key": "(hidden)",
        "api_key_env": "K",
        "token": "(hidden)",
        "prompt_tokens": 5,
    }
    assert redact({"url": "https://u:p@host/v1?key=abc&x=1"}) == {"url": "https://host/v1?key=(hidden)&x=1"}


def test_p_values_use_scientific_notation_when_small():
    values = (9.5e-07, 0.0001, 0.00099, 0.001, 0.0468, 0.61, 0.999, 0.99994, 0.999998, 1.0, 0.0, None, math.nan)
    assert [pval(v) for v in values] == [
        "9.50e-07", "1.00e-04", "9.90e-04", "0.001", "0.0468", "0.61",
        "0.999", "> 0.999", "> 0.999", "1", "0", "–", "–",
    ]  # fmt: skip


def test_comparison_page_defaults_every_score_to_a_zero_gate():
    page = render_comparison_report(
        {"verdict": "GO", "scores": [{"name": "a", "delta": 0.01, "ci_low": 0.0, "ci_high": 0.02, "verdict": "GO"}]},
        [],
    )
    assert "<td>0</td>" in page and "1 gated score; none dropped beyond its gate." in page


def test_comparison_page_reads_the_earlier_gate_fields_too():
    score = {"name": "a", "delta": -0.2, "ci_low": -0.3, "ci_high": -0.1, "verdict": "NO-GO", "p_value": 4.2e-09,
             "p_value_adjusted": 8.4e-09, "test": "paired-t"}  # fmt: skip
    page = render_comparison_report(
        {"verdict": "NO-GO", "policy": {"correction": "holm", "scores": {"a": {"max_drop": 0.05}}}, "scores": [score]},
        [],
    )
    assert "<th>p (δ = 0), Holm-adjusted</th>" in page and "<td>8.40e-09</td>" in page
    assert "4.20e-09<br><small>paired-t</small>" in page and "<td>−0.0500</td>" in page
    assert "p regression" not in page and "0.0000</td>" not in page


def test_margins_come_from_the_scores_when_the_comparison_has_them():
    comparison = {
        "policy": {"scores": {"a": {"max_drop": 0.5}}},
        "scores": [{"name": "a", "margin": 0.01}, {"name": "judge", "margin": None}, {"name": "b", "margin": 0.2,
                                                                                       "gated": False}],
    }  # fmt: skip
    assert gate_thresholds(comparison) == {"a": 0.01}
    assert gate_thresholds({"policy": {"scores": {"a": {"max_drop": 0.5}}}, "scores": [{"name": "a"}]}) == {"a": 0.5}
    page = render_comparison_report({**comparison, "policy": {"correction": "none"}}, [])
    assert "not gated" in page


def test_a_one_to_five_judge_score_gets_its_own_delta_axis():
    """The comparison page drew every delta on one axis: a 1-5 judge's -0.8 squashed the 0-1 scores' deltas."""
    scores = [
        {"name": "em", "delta": -0.02, "ci_low": -0.05, "ci_high": 0.01, "verdict": "GO", "range": [0.0, 1.0]},
        {"name": "f1", "delta": 0.01, "ci_low": -0.01, "ci_high": 0.03, "verdict": "GO", "range": [0.0, 1.0]},
        {"name": "judge", "delta": -0.8, "ci_low": -1.2, "ci_high": -0.4, "verdict": "NO-GO", "range": [1.0, 5.0]},
    ]
    page = render_comparison_report({"verdict": "NO-GO", "scores": scores}, [])
    forest = page[page.index('<section id="forest">') : page.index("</section>", page.index('<section id="forest">'))]
    plots = re.findall(r'<svg class="chart forest".*?</svg>', forest)
    assert re.findall(r'<h3 class="scale">([^<]+)</h3>', forest) == ["scores on [0.00, 1.00]", "scores on [1.00, 5.00]"]
    assert [re.findall(r'data-score="([^"]+)"', plot) for plot in plots] == [["em", "f1"], ["judge"]]
