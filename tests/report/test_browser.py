"""The reports in a real headless Chromium, opened from disk with networking blocked.

A real offline run (groups, failures, a row holding ``</script><script>``) and a real
online run with an LLM judge (rubric and range scores, a system prompt) write their
reports; the browser must show exactly what results.json says (titles, labels, values),
draw the judge's rubric, open a row to its transcript, keep every table inside the page,
fetch nothing, log no error, filter rows as the user types, sort the group table, and
draw a page that is not blank. A 100,000-group run's page must stay small and load fast.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beameval.testserver.harness import ServerProcess
from pipeline.report import main as report_main
from pipeline.report import write_comparison_report

pytestmark = pytest.mark.slow

CATEGORIES = ["alpha", "beta", "gamma", "delta"]
TOKEN = "Zebra-unique-token"
EVIL = "</script><script>window.pwned = 1</script><img src=x onerror=window.pwned=2>"


def dataset_rows(n: int = 300) -> list[dict]:
    rows = []
    for i in range(n):
        answer = None if i % 25 == 3 else f"answer {i % 7}"
        output = f"answer {i % 7}" if i % 3 else f"answer {(i + 1) % 7}"
        if i in (42, 199):
            output = f"{TOKEN} answer"
        if i == 7:
            output = EVIL
        rows.append({"id": f"q{i:03d}", "category": CATEGORIES[i % 4], "answer": answer, "output": output})
    return rows


def config(path: Path) -> dict:
    return {
        "dataset": {"path": str(path)},
        "params": {"ignore_request_failure": True},
        "statistics": {"group_by": ["category"]},
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
            {"type": "f1", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
        ],
    }


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real offline run, made once for the module (its report is written by the run itself)."""
    from pipeline.run import main

    base = tmp_path_factory.mktemp("report-run")
    data = base / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in dataset_rows()))
    import yaml

    (base / "eval.yaml").write_text(yaml.safe_dump(config(data)))
    code = main(["--config", str(base / "eval.yaml"), "--output", str(base / "out"), "--progress_interval=0"])
    assert code == 0
    return base / "out"


def test_run_report_shows_results_json(browser, run_dir: Path) -> None:
    results = json.loads((run_dir / "results.json").read_text())
    page = run_dir / "report.html"
    assert page.exists(), "every completed run writes report.html"
    browser.open(page)

    for score in results["aggregate_scores"]["scores"]:
        card = browser.eval(f"document.querySelector('.card.score[data-score=\"{score['name']}\"]').textContent")
        assert f"{score['mean']:.4f}" in card, (score["name"], card)
        if score.get("ci_low") is not None:
            assert f"[{score['ci_low']:.4f}, {score['ci_high']:.4f}]" in card, card
        assert f"n = {score['count']:,}" in card
        bins = [b for b in score["histogram"]["bins"]]
        drawn = browser.eval(f"document.querySelectorAll('svg.chart[data-score=\"{score['name']}\"] rect.bar').length")
        assert drawn == len(bins) >= 1, score["name"]

    groups = {f"category={g['value']}": g["counts"]["rows"] for g in results["groups"]}
    assert set(groups) == {f"category={c}" for c in CATEGORIES}
    shown = browser.eval(
        "Array.from(document.querySelectorAll('table.sortable[data-by=\"category\"] tr[data-group]'))"
        ".map(r => [r.getAttribute('data-group'), r.cells[1].textContent])"
    )
    assert {token: int(n.replace(",", "")) for token, n in shown} == groups

    # Sorting by size: a click sorts descending, a second ascending.
    browser.eval("document.querySelector('table.sortable th[data-sort=\"n\"]').click()")
    sizes = browser.eval(
        "Array.from(document.querySelectorAll('table.sortable tr[data-group]')).map(r => +r.dataset.n)"
    )
    assert sizes == sorted(groups.values(), reverse=True)

    errors = results["counts"]["errors"]
    assert errors == sum(1 for r in dataset_rows() if r["answer"] is None) > 0
    assert browser.eval("document.querySelector('#failures .errors').textContent") == f"{errors:,}"
    phases = browser.eval("document.querySelector('#failures').textContent")
    assert "scoring" in phases

    assert browser.eval("document.querySelectorAll('#rows-table tbody.r').length") == results["counts"]["rows"]
    assert browser.eval("document.querySelector('#rows .note.sample')") is None  # every row fits

    # The hostile row is text on the page, never markup or script.
    assert browser.eval("typeof window.pwned") == "undefined"
    assert browser.eval(f"document.querySelector('#rows-table').textContent.includes({json.dumps(EVIL)})")

    log = browser.log()
    assert log.requests == [page.resolve().as_uri()], log.requests
    assert log.console_errors == []


def assert_tables_fit(browser) -> None:
    """No table is cut off at 1,280 px: each fits its box (or scrolls under a sticky first column)."""
    browser.screenshot(1280, 900)  # sets the viewport
    overflowing = browser.eval(
        "Array.from(document.querySelectorAll('.scroll')).filter(d => d.scrollWidth > d.clientWidth + 1)"
        ".map(d => d.querySelector('table').className)"
    )
    assert overflowing == []


def visible_rows(browser) -> list[int]:
    return browser.eval(
        "Array.from(document.querySelectorAll('#rows-table tbody.r')).filter(b => !b.hidden)"
        ".map(b => +b.querySelector('td').textContent)"
    )


def test_typing_a_search_filters_the_rows(browser, run_dir: Path) -> None:
    browser.open(run_dir / "report.html")
    assert len(visible_rows(browser)) == 100  # one page of the 300 rows
    browser.type_into("#rows-search", TOKEN.lower()[:12])
    expected = [i for i, r in enumerate(dataset_rows()) if TOKEN.lower()[:12] in json.dumps(r).lower()]
    assert visible_rows(browser) == expected == [42, 199]

    browser.eval("const s = document.querySelector('#rows-search'); s.value = ''; s.dispatchEvent(new Event('input'))")
    browser.eval(
        "const st = document.querySelector('[data-filter=status]'); st.value = 'error';"
        "st.dispatchEvent(new Event('change', {bubbles: true}))"
    )
    assert visible_rows(browser) == [i for i, r in enumerate(dataset_rows()) if r["answer"] is None]

    # "show rows" of a failure cause selects that cause's rows.
    browser.eval("document.querySelector('a[data-failure]').click()")
    assert visible_rows(browser) == [i for i, r in enumerate(dataset_rows()) if r["answer"] is None]
    assert browser.log().console_errors == []


def test_screenshot_is_not_blank(browser, run_dir: Path, decode_png) -> None:
    browser.open(run_dir / "report.html")
    width, height, rows = decode_png(browser.screenshot(1280, 1600, scale=0.25))
    assert (width, height) == (320, 400)
    pixels = Counter(row[i : i + 3] for row in rows for i in range(0, len(row), 3))
    assert len(pixels) > 50, "the page looks blank"
    assert pixels.most_common(1)[0][1] < 0.9 * width * height


def test_regenerated_report_with_a_sample_says_so(browser, run_dir: Path, tmp_path: Path, capsys) -> None:
    copy = tmp_path / "run"
    copy.mkdir()
    for name in ("results.json",):
        (copy / name).write_text((run_dir / name).read_text())
    for folder in ("rows", "errors"):
        (copy / folder).mkdir()
        for path in (run_dir / folder).iterdir():
            (copy / folder / path.name).write_bytes(path.read_bytes())
    assert report_main([str(copy), "--rows", "50"]) == 0
    assert capsys.readouterr().out.strip() == str(copy / "report.html")
    browser.open(copy / "report.html")
    errors = json.loads((run_dir / "results.json").read_text())["counts"]["errors"]
    assert browser.eval("document.querySelectorAll('#rows-table tbody.r').length") == 50
    note = browser.eval("document.querySelector('#rows .note.sample').textContent")
    assert f"50 of the run's 300 rows: {errors} of {errors} failed rows" in note
    statuses = browser.eval("Array.from(document.querySelectorAll('#rows-table tbody.r')).map(b => b.dataset.status)")
    assert statuses.count("error") == errors


COMPARISON = {
    "verdict": "NO-GO",
    "baseline": {"output": "runs/a", "run_id": "run-a-1", "finished_at": "2026-11-30T02:00:00Z",
                 "models_seen": [{"model": "model-a", "count": 204}]},
    "candidate": {"output": "runs/b", "run_id": "run-b-2", "finished_at": "2026-12-01T02:00:00Z",
                  "target_model": "model-b"},
    "counts": {"baseline_rows": 203, "candidate_rows": 210, "paired": 200, "failed_candidate": 9},
    "key": "id",
    "scores": [
        {
            "name": "exact-match.exact-match", "n_paired": 200, "unpaired_baseline": 3, "unpaired_candidate": 1,
            "baseline_mean": 0.71, "candidate_mean": 0.62, "delta": -0.09, "delta_stderr": 0.02,
            "ci_low": -0.1294, "ci_high": -0.0506, "confidence_level": 0.95, "test": "mcnemar-exact",
            "p_value": 9.5e-07, "mde": 0.04, "improved": 4, "regressed": 22, "verdict": "NO-GO",
            "margin": 0.02, "p_noninferiority": 0.9999, "p_regression": 3.1e-05, "p_regression_adjusted": 6.2e-05,
        },
        {
            "name": "f1.f1", "n_paired": 200, "unpaired_baseline": 3, "unpaired_candidate": 1,
            "baseline_mean": 0.80, "candidate_mean": 0.805, "delta": 0.005, "delta_stderr": 0.01,
            "ci_low": -0.0147, "ci_high": 0.0247, "confidence_level": 0.95, "test": "paired-t",
            "p_value": 0.61, "mde": 0.03, "improved": 9, "regressed": 7, "verdict": "GO",
            "margin": 0.01, "p_noninferiority": 0.011, "p_regression": 0.989, "p_regression_adjusted": 0.989,
        },
    ],
    "groups": [
        {"by": "category", "value": c, "n_paired": 50 + i,
         "scores": [{"name": "exact-match.exact-match", "delta": -0.1 - i / 100, "ci_low": -0.2, "ci_high": 0.0,
                     "verdict": "INCONCLUSIVE"}]}
        for i, c in enumerate(CATEGORIES)
    ],
    "policy": {"alpha": 0.05, "correction": "holm", "scores": {"exact-match.exact-match": {"max_drop": 0.02},
                                                                "f1.f1": {"max_drop": 0.02}}},
}  # fmt: skip


def flips() -> list[dict]:
    out = []
    for i in range(30):
        worse = i % 3 != 0
        out.append(
            {
                "key": f"q{i:03d}",
                "regressed": ["exact-match.exact-match"] if worse else [],
                "improved": [] if worse else ["exact-match.exact-match"],
                "baseline_output": f"baseline says {i}" + (" </script><b>x</b>" if i == 5 else ""),
                "candidate_output": f"candidate says {i}",
                "baseline_scores": {"exact-match.exact-match": 1.0 if worse else 0.0},
                "candidate_scores": {"exact-match.exact-match": 0.0 if worse else 1.0},
                "item": {"question": f"question {i}"},
            }
        )
    return out


def test_comparison_report(browser, tmp_path: Path) -> None:
    (tmp_path / "comparison.json").write_text(json.dumps(COMPARISON))
    (tmp_path / "flips.jsonl").write_text("".join(json.dumps(f) + "\n" for f in flips()))
    page = Path(write_comparison_report(str(tmp_path)))
    browser.open(page)
    assert browser.eval("document.title") == "model-b vs model-a (baseline), 2026-12-01"
    sides = browser.eval(
        "Array.from(document.querySelectorAll('#sides tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    assert sides == [
        ["baseline", "model-a", "run-a-1", "2026-11-30T02:00:00Z", "203", "runs/a"],
        ["candidate", "model-b", "run-b-2", "2026-12-01T02:00:00Z", "210 (9 failed)", "runs/b"],
    ]
    assert "{'" not in browser.eval("document.body.textContent")  # no Python dict anywhere
    assert browser.eval("document.querySelector('#verdict .verdict').textContent") == "NO-GO"
    forest = browser.eval(
        "Array.from(document.querySelectorAll('svg.forest g.score')).map(g => [g.dataset.score, g.textContent,"
        " g.querySelectorAll('line.gate').length, g.querySelectorAll('line.whisker').length,"
        " +g.querySelector('circle').getAttribute('cx'), +g.querySelector('line.gate').getAttribute('x1')])"
    )
    assert [f[0] for f in forest] == [s["name"] for s in COMPARISON["scores"]]
    for (_, text, gates, whiskers, _, _), score in zip(forest, COMPARISON["scores"], strict=True):
        assert f"{score['delta']:.4f} [{score['ci_low']:.4f}, {score['ci_high']:.4f}]" in text
        assert (gates, whiskers) == (1, 1)
    # One axis: positions are linear in the values across scores (the zero line sits between them).
    ticks = browser.eval("Array.from(document.querySelectorAll('svg.forest text.tick')).map(t => t.textContent)")
    assert len(ticks) >= 4 and "0.00" in ticks
    zero = browser.eval("+document.querySelector('svg.forest line.zero').getAttribute('x1')")
    (_, _, _, _, x_a, gate_a), (_, _, _, _, x_b, gate_b) = forest
    scale = (x_b - x_a) / (0.005 - -0.09)
    assert (zero - x_a) / scale == pytest.approx(0.09, abs=0.001)
    assert (gate_a - zero) / scale == pytest.approx(-0.02, abs=0.001)
    assert (gate_b - zero) / scale == pytest.approx(-0.01, abs=0.001)
    head = browser.eval("Array.from(document.querySelectorAll('#scores thead th')).map(t => t.textContent)")
    assert "p (δ = 0, two-sided, not adjusted)" in head and "p regression (δ < −margin), Holm-adjusted" in head
    cells = browser.eval(
        "Array.from(document.querySelectorAll('#scores tbody tr')).map(r => Array.from(r.cells).map(c => c.innerText))"
    )
    column = {name: head.index(name) for name in head}
    assert cells[0][column["p (δ = 0, two-sided, not adjusted)"]].split("\n")[0] == "9.50e-07"
    assert cells[0][column["p regression (δ < −margin), Holm-adjusted"]] == "6.20e-05\n3.10e-05 not adjusted"
    assert [row[column["margin"]] for row in cells] == ["−0.0200", "−0.0100"]
    for score, row in zip(COMPARISON["scores"], cells, strict=True):
        assert row[column["pairs"]].startswith(str(score["n_paired"]))
        assert row[column["improved / regressed"]] == f"{score['improved']} / {score['regressed']}"
    groups = browser.eval(
        "Array.from(document.querySelectorAll('#groups tbody tr'))"
        ".map(r => [r.cells[0].textContent, r.cells[1].textContent])"
    )
    assert groups == [[c, str(50 + i)] for i, c in reversed(list(enumerate(CATEGORIES)))]  # largest first
    assert_tables_fit(browser)
    assert browser.eval("document.querySelectorAll('#flips-table tbody.r').length") == 30
    regressed = [f["key"] for f in flips() if f["regressed"]]
    browser.eval(
        "const d = document.querySelector('[data-filter=dir]'); d.value = 'regressed';"
        "d.dispatchEvent(new Event('change', {bubbles: true}))"
    )
    keys = browser.eval(
        "Array.from(document.querySelectorAll('#flips-table tbody.r')).filter(b => !b.hidden)"
        ".map(b => b.querySelector('td').textContent)"
    )
    assert sorted(keys) == sorted(regressed)
    browser.type_into("#flips-search", "candidate says 13")
    keys = browser.eval(
        "Array.from(document.querySelectorAll('#flips-table tbody.r')).filter(b => !b.hidden)"
        ".map(b => b.querySelector('td').textContent)"
    )
    assert keys == ["q013"]
    log = browser.log()
    assert log.requests == [page.resolve().as_uri()] and log.console_errors == []
    assert browser.eval("document.querySelectorAll('#flips b').length") == 0  # the flip's "<b>" stayed text


JUDGE_ROWS = [
    {
        "id": f"q{i}",
        "question": f"capital of country {i}?",
        "answer": f"City {i}",
        "category": "geo" if i % 2 else "hist",
    }
    for i in range(12)
]


@pytest.fixture(scope="module")
def judge_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real online run: target and LLM judge on the test server, a system prompt, rubric and range scores."""
    import yaml

    from pipeline.run import main

    base = tmp_path_factory.mktemp("judge-run")
    (base / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in JUDGE_ROWS))
    labels = ["bad", "so-so", "good", "good"]
    rules = [
        {"match": f"JUDGE {i}:", "reply": json.dumps({"quality": labels[i % 4], "confidence": 1 + i % 5})}
        for i in range(12)
    ]
    rules += [{"match": r["question"], "reply": r["answer"] if i % 3 else "no idea"} for i, r in enumerate(JUDGE_ROWS)]
    with ServerProcess(rules=rules) as server:
        config = {
            "dataset": {"path": str(base / "data.jsonl"), "id_field": "id"},
            "target": {"model": {"url": server.base_url, "name": "acme-chat", "format": "openai"}},
            "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
            "params": {"system_prompt": "Answer with the city only."},
            "statistics": {"group_by": ["category"]},
            "metrics": [
                {"type": "exact-match", "reference": "{{ item.answer }}"},
                {"type": "llm-judge", "model": {"url": server.base_url, "name": "judge", "format": "openai"},
                 "prompt_template": {"messages": [{"role": "user", "content":
                                                   "JUDGE {{ item.id[1:] }}: {{ sample.output_text }}"}]},
                 "scores": [{"name": "quality", "rubric": [{"label": "bad", "value": 0},
                                                           {"label": "so-so", "value": 0.5},
                                                           {"label": "good", "value": 1}]},
                            {"name": "confidence", "minimum": 1, "maximum": 5}]},
            ],
        }  # fmt: skip
        (base / "eval.yaml").write_text(yaml.safe_dump(config))
        code = main(["--config", str(base / "eval.yaml"), "--output", str(base / "out"), "--progress_interval=0"])
    assert code == 0
    return base / "out"


def test_judge_run_report_draws_rubrics_and_opens_rows_to_their_transcript(browser, judge_run: Path) -> None:
    results = json.loads((judge_run / "results.json").read_text())
    shard = next((judge_run / "rows").glob("*.parquet"))
    assert pq.read_schema(shard).field("request").type == pa.string()  # the transcript's request column
    browser.open(judge_run / "report.html")
    date = results["provenance"]["started_at"][:10]
    assert browser.eval("document.title") == f"acme-chat on data.jsonl, {date}"
    assert browser.eval("document.querySelector('h1').textContent") == f"acme-chat on data.jsonl, {date}"
    assert results["provenance"]["run_id"] in browser.eval("document.querySelector('.sub').textContent")

    quality = next(s for s in results["aggregate_scores"]["scores"] if s["name"] == "llm-judge.quality")
    drawn = browser.eval(
        "Array.from(document.querySelectorAll('svg.rubric[data-score=\"llm-judge.quality\"] g.level'))"
        ".map(g => [g.dataset.label, +g.dataset.count, g.textContent])"
    )
    expected = [(d["label"], d["count"]) for d in quality["rubric_distribution"]]
    assert [(label, count) for label, count, _ in drawn] == expected == [("bad", 3), ("so-so", 3), ("good", 6)]
    assert "no values to plot" not in browser.eval("document.querySelector('#histograms').textContent")
    means = browser.eval("Array.from(document.querySelectorAll('#histograms .mean-label')).map(t => t.textContent)")
    by_name = {s["name"]: s for s in results["aggregate_scores"]["scores"]}
    assert means == [
        f"mean {by_name['exact-match.exact-match']['mean']:.3f}",
        f"mean {quality['mean']:.3f} · mode {quality['mode_category']}",
        f"mean {by_name['llm-judge.confidence']['mean']:.3f}",
    ]

    headings = browser.eval("Array.from(document.querySelectorAll('h1, h2, h3')).map(h => h.textContent)")
    assert len(headings) == len(set(headings)), headings

    browser.eval("document.querySelectorAll('#rows-table tbody.r')[1].querySelector('tr.sum').click()")
    detail = "document.querySelectorAll('#rows-table tbody.r')[1].querySelector('tr.det')"
    labels = browser.eval(f"Array.from({detail}.querySelectorAll('.label')).map(l => l.textContent)")
    # The request as sent (rows/ `request`): the system prompt and the rendered user turn, then the answer.
    assert labels[:4] == ["system", "user", "assistant", "judge llm-judge (judge)"]
    assert len(labels) == len(set(labels)), labels
    turns = browser.eval(f"Array.from({detail}.querySelectorAll('.turn pre')).map(p => p.textContent)")
    assert turns[:3] == ["Answer with the city only.", JUDGE_ROWS[1]["question"], "City 1"]
    assert json.loads(turns[3]) == {"quality": "so-so", "confidence": 2}
    gave = browser.eval(f"{detail}.querySelector('.judge-scores').textContent")
    assert gave == "judge llm-judge gave: quality: 0.5000 · confidence: 2.0000 · quality.label: so-so"
    assert_tables_fit(browser)
    log = browser.log()
    assert log.console_errors == [] and len(log.requests) == 1


def test_a_100000_group_report_is_small_and_loads_fast(browser, tmp_path: Path) -> None:
    """What a run grouped by a 100,000-value field writes (57 MB and 96 s to render before the cap)."""
    score = {"name": "exact-match.exact-match", "mean": 0.5, "ci_low": 0.1, "ci_high": 0.9, "count": 100_000}
    groups = [
        {"by": "id", "value": f"v{i:06d}", "counts": {"rows": 1 + (i < 10), "ok": 1, "errors": 0},
         "scores": [{**score, "count": 1}]}
        for i in range(100_000)
    ]  # fmt: skip
    (tmp_path / "results.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "aggregate_scores": {"scores": [score]},
                "groups": groups,
                "counts": {"rows": 100_010},
            }
        )
    )
    started = time.perf_counter()
    assert report_main([str(tmp_path)]) == 0
    written = time.perf_counter() - started
    page = tmp_path / "report.html"
    assert page.stat().st_size < 200_000
    started = time.perf_counter()
    browser.open(page)
    loaded = time.perf_counter() - started
    assert written < 20 and loaded < 10, (written, loaded)  # ~2 s and ~0.1 s unloaded
    drawn = browser.eval("Array.from(document.querySelectorAll('#groups tr[data-group]')).map(r => r.dataset.group)")
    assert drawn[:10] == [f"id=v{i:06d}" for i in range(10)] and len(drawn) == 50
    note = browser.eval("document.querySelector('#groups .groups-rest').textContent")
    assert note.startswith("The 50 largest of 100,000 groups are drawn. The other 99,950 groups hold 99,950 rows")
