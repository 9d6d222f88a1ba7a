"""The run page's parts as pure functions: rubric charts, the labelled mean, the title, transcripts, the group cap."""

from __future__ import annotations

import json
import re

import pytest

from beameval.report import render_run_report
from beameval.report.charts import histogram, rubric_bars
from beameval.report.run_page import GROUP_CAP, run_title

RUBRIC = {
    "name": "llm-judge.quality", "score_type": "rubric", "count": 233, "nan_count": 7, "mean": 0.5665,
    "rubric_distribution": [
        {"label": "bad", "description": None, "value": 0.0, "count": 74},
        {"label": "so-so", "description": None, "value": 0.5, "count": 54},
        {"label": "good", "description": None, "value": 1.0, "count": 105},
    ],
    "mode_category": "good",
}  # fmt: skip


def test_a_rubric_score_is_drawn_from_its_label_counts():
    page = render_run_report({"aggregate_scores": {"scores": [RUBRIC]}}, [])
    assert "no values to plot" not in page
    svg = rubric_bars(RUBRIC["name"], RUBRIC, width=340)
    levels = re.findall(r'<g class="level" data-label="([^"]+)" data-count="(\d+)">', svg)
    assert levels == [("bad", "74"), ("so-so", "54"), ("good", "105")]
    widths = [float(w) for w in re.findall(r'<rect class="bar" x="110" y="[\d.]+" width="([\d.]+)"', svg)]
    assert widths == pytest.approx([74 / 105 * 140, 54 / 105 * 140, 140], abs=0.06)  # 340 - 110 - 90 px of bar
    assert "74 · 32%" in svg and "105 · 45%" in svg and "mean 0.567 · mode good" in svg


def test_the_histogram_mean_line_is_labelled_where_it_is_drawn():
    score = {
        "mean": 0.25,
        "histogram": {"bins": [{"lower_bound": 0.0, "upper_bound": 0.5, "count": 3}, {"lower_bound": 0.5,
                                                                                     "upper_bound": 1.0, "count": 1}]},
    }  # fmt: skip
    svg = histogram("s", score, width=340, height=160)
    line = float(re.search(r'<line class="mark" x1="([\d.]+)"', svg).group(1))
    label = re.search(r'<text class="mean-label" x="([\d.]+)"[^>]*>([^<]+)</text>', svg)
    assert line == pytest.approx(34 + 0.25 * (340 - 34 - 10), abs=0.06)
    assert label.group(2) == "mean 0.250" and float(label.group(1)) == pytest.approx(line + 3, abs=0.06)
    assert re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', svg) == ["0.0", "0.5", "1.0"]


@pytest.mark.parametrize(
    ("results", "title"),
    [
        (
            {"provenance": {"run_id": "abc", "started_at": "2026-12-01T23:29:22Z",
                            "dataset": {"paths": ["/d/qa.jsonl"]},
                            "models_seen": [{"model": "m-1", "count": 3}, {"model": "m-2", "count": 1}]}},
            "m-1 vs m-2 on qa.jsonl, 2026-12-01",
        ),
        ({"config": {"target": {"model": {"name": "gpt-x"}}, "dataset": {"path": "gs://b/eval/set.parquet"}}},
         "gpt-x on set.parquet"),
        ({"config": {"target": None, "dataset": {"path": "data.jsonl"}}}, "offline on data.jsonl"),
        ({}, "Evaluation"),
    ],
)  # fmt: skip
def test_the_title_names_models_dataset_and_date_not_the_run_id(results, title):
    assert run_title(results) == title
    assert f"<title>{title}</title>" in render_run_report(results, [])


def transcript_row(**extra):
    request = {
        "model": "m-1", "temperature": 0, "api_key": "sk-live-123456789",
        "messages": [{"role": "system", "content": "You answer in two words."},
                     {"role": "user", "content": "Capital of France?"},
                     {"role": "assistant", "content": "Paris, France."},
                     {"role": "user", "content": "Capital of Japan?"}],
    }  # fmt: skip
    judge_request = {"model": "j", "messages": [{"role": "user", "content": "JUDGE: Tokyo vs Tokyo"}]}
    return {
        "row_index": 0, "status": "ok", "item": json.dumps({"q": "Capital of Japan?", "answer": "Tokyo"}),
        "output_text": "Tokyo", "exact-match.exact-match": 1.0, "error": None, "id": "q7",
        "request": json.dumps(request), "llm-judge.quality": 1.0, "llm-judge.quality.label": "good",
        "llm-judge.nan_reason": "",
        "llm-judge.reply": json.dumps(
            {"text": '{"quality": "good"}', "model": "j", "request": json.dumps(judge_request)}
        ),
        **extra,
    }  # fmt: skip


def labels(page: str) -> list[str]:
    detail = page[page.index('<tr class="det"') :]
    return re.findall(r'<div class="label">([^<]+)</div>', detail)


def test_a_row_opens_to_its_transcript_in_order_with_unique_titles():
    page = render_run_report({"config": {"metrics": [{"reference": "{{ item.answer }}"}]}}, [transcript_row()])
    assert labels(page) == [
        "system", "user", "assistant", "user 2", "assistant 2",
        "judge llm-judge · user", "judge llm-judge (j)", "reference", "scores and facts",
    ]  # fmt: skip
    assert "sk-live-123456789" not in page and "api_key: <b>(hidden)</b>" in page
    assert "request parameters: model: <b>m-1</b> · temperature: <b>0</b>" in page
    assert "judge llm-judge gave: quality: <b>1.0000</b> · quality.label: <b>good</b>" in page
    assert "id: <b>q7</b>" in page


def test_a_row_without_a_stored_request_says_so_and_shows_its_item():
    row = transcript_row(request=None, http_status=200)
    page = render_run_report({}, [row])
    assert "The request sent is not recorded in this run's rows/; the row it was built from:" in page
    assert labels(page)[:2] == ["row (item)", "assistant"]


def test_a_completions_prompt_is_one_turn():
    page = render_run_report({}, [transcript_row(request=json.dumps({"prompt": "Q: 2+2?\nA:", "max_tokens": 5}))])
    assert labels(page)[:2] == ["prompt", "assistant"] and "Q: 2+2?\nA:" in page


def groups_results(n: int) -> dict:
    score = {"name": "exact-match.exact-match", "mean": 0.5, "ci_low": 0.1, "ci_high": 0.9, "count": 2}
    groups = [
        {"by": "id", "value": f"v{i:06d}", "counts": {"rows": 1 + (i % 7 == 0) * (i % 5), "ok": 1, "errors": i % 2},
         "scores": [score]}
        for i in range(n)
    ]  # fmt: skip
    return {"aggregate_scores": {"scores": [score]}, "groups": groups}


def test_100000_groups_draw_the_largest_and_summarise_the_rest_in_a_small_page():
    results = groups_results(100_000)
    page = render_run_report(results, [])
    assert len(page.encode()) < 200_000, len(page.encode())  # 57 MB when every group was drawn
    drawn = re.findall(r'<tr data-group="id=(v\d+)" data-n="(\d+)"', page)
    ranked = sorted(results["groups"], key=lambda g: (-g["counts"]["rows"], g["value"]))
    assert [(v, int(n)) for v, n in drawn] == [(g["value"], g["counts"]["rows"]) for g in ranked[:GROUP_CAP]]
    rest = ranked[GROUP_CAP:]
    note = re.search(r'<p class="note groups-rest" data-by="id">([^<]+)</p>', page).group(1)
    assert note == (
        f"The 50 largest of 100,000 groups are drawn. The other {len(rest):,} groups hold "
        f"{sum(g['counts']['rows'] for g in rest):,} rows ({sum(g['counts']['errors'] for g in rest):,} failed), "
        f"at most {rest[0]['counts']['rows']} rows each; results.json holds every group."
    )
    assert "<h3>by id (100,000 groups)</h3>" in page


def test_groups_under_the_cap_are_all_drawn_without_a_note():
    page = render_run_report(groups_results(GROUP_CAP), [])
    assert len(re.findall(r"<tr data-group=", page)) == GROUP_CAP and "groups-rest" not in page


def test_the_rows_table_shows_the_id_field_the_prompts_inputs_and_the_reference():
    config = {
        "dataset": {"path": "d.jsonl", "id_field": "qid"},
        "prompt_template": {
            "messages": [{"role": "user", "content": "Context: {{ item.context }}\nQ: {{ item.question }}"}]
        },
        "metrics": [{"type": "exact-match", "reference": "{{ item.gold }}"}],
    }
    item = {"qid": "Q-17", "context": "Paris is in France.", "question": "Capital of France?", "gold": "Paris"}
    row = {
        "row_index": 3,
        "status": "ok",
        "item": json.dumps(item),
        "output_text": "Paris",
        "exact-match.exact-match": 1.0,
    }
    page = render_run_report({"config": config, "aggregate_scores": {"scores": []}}, [row])
    head = re.search(r'<table class="browse" id="rows-table"><thead><tr>(.*?)</tr>', page).group(1)
    names = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<th>(.*?)</th>", head)]
    assert names[:5] == ["row", "qid", "context", "question", "reference"]
    summary = re.search(r'<tr class="sum">(.*?)</tr>', page).group(1)
    cells = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", summary)]
    assert cells[:6] == ["3", "Q-17", "Paris is in France.", "Capital of France?", "Paris", "ok"]
