"""The reports in a real headless Chromium, opened from disk with networking blocked.

A real offline run (groups, failures, a row holding ``</script><script>``) writes its
report; the browser must show exactly what results.json says, fetch nothing, log no error,
filter rows as the user types, sort the group table, and draw a page that is not blank.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

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
    "baseline": "runs/a",
    "candidate": "runs/b",
    "scores": [
        {
            "name": "exact-match.exact-match", "n_paired": 200, "unpaired_baseline": 3, "unpaired_candidate": 1,
            "baseline_mean": 0.71, "candidate_mean": 0.62, "delta": -0.09, "delta_stderr": 0.02,
            "ci_low": -0.1294, "ci_high": -0.0506, "confidence_level": 0.95, "test": "mcnemar-exact",
            "p_value": 0.0001, "mde": 0.04, "improved": 4, "regressed": 22, "verdict": "NO-GO",
        },
        {
            "name": "f1.f1", "n_paired": 200, "unpaired_baseline": 3, "unpaired_candidate": 1,
            "baseline_mean": 0.80, "candidate_mean": 0.805, "delta": 0.005, "delta_stderr": 0.01,
            "ci_low": -0.0147, "ci_high": 0.0247, "confidence_level": 0.95, "test": "paired-t",
            "p_value": 0.61, "mde": 0.03, "improved": 9, "regressed": 7, "verdict": "GO",
        },
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
    assert browser.eval("document.querySelector('#verdict .verdict').textContent") == "NO-GO"
    forest = browser.eval(
        "Array.from(document.querySelectorAll('svg.forest g.score')).map(g => [g.dataset.score, g.textContent,"
        " g.querySelectorAll('line.gate').length, g.querySelectorAll('line.whisker').length])"
    )
    assert [f[0] for f in forest] == [s["name"] for s in COMPARISON["scores"]]
    for (_, text, gates, whiskers), score in zip(forest, COMPARISON["scores"], strict=True):
        assert f"{score['delta']:.4f} [{score['ci_low']:.4f}, {score['ci_high']:.4f}]" in text
        assert (gates, whiskers) == (1, 1)
    table = browser.eval("document.querySelector('#scores').textContent")
    for score in COMPARISON["scores"]:
        for key in ("n_paired", "improved", "regressed"):
            assert str(score[key]) in table
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
