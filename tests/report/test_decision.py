"""The ``--decide`` section of a run report: the verdict, one narrowing chart per score, the last bounds."""

from beameval.report.decision import decision_section, narrowing_chart

WAVES = [
    {
        "rows": rows,
        "scores": [
            {"name": "em", "n": rows, "mean_delta": -0.2, "cs_low": low, "cs_high": high, "margin": 0.05},
            {"name": "ok_rate", "n": rows, "mean_delta": 0.0, "cs_low": None, "cs_high": None, "margin": 0.05},
        ],
    }
    for rows, low, high in ((100, -0.6, 0.2), (200, -0.4, -0.08))
]
DECISION = {
    "verdict": "NO-GO",
    "seed": 0,
    "wave_rows": 100,
    "rows_evaluated": 200,
    "rows_total": 1000,
    "requests_sent": 200,
    "waves": WAVES,
}


def test_a_chart_draws_each_wave_against_the_margin() -> None:
    svg = narrowing_chart("em", WAVES)
    assert svg.count('class="whisker"') == 2 and 'class="gate"' in svg
    assert "200 rows: [-0.4000, -0.0800]" in svg and "−margin (-0.0500)" in svg
    assert narrowing_chart("ok_rate", WAVES) == ""  # no bounds yet: nothing to draw


def test_the_section_says_the_verdict_and_the_rows_used() -> None:
    html = decision_section(DECISION)
    assert 'id="decision"' in html and ">NO-GO</b> after 200 of 1,000 rows" in html
    assert html.count("<figure>") == 2 and "<td>em</td>" in html
    assert decision_section(None) == "" and decision_section({"waves": []}) == ""
