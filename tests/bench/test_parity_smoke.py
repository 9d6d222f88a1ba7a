"""``bench/parity.py --smoke`` runs our side end to end; its comparison logic is unit-tested here.

The subprocess run is pointed at a Python that does not exist, so it never depends on the
reference SDK being installed (nor on parity itself): it must say the reference is not
available, exit 0 and produce every expected score name. Parity proper is what
``bench/parity.py`` without ``--smoke`` reports.
"""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from beameval.testserver.harness import PROJECT_ROOT

OFFLINE_SCORES = [
    "exact-match.exact-match",
    "f1.f1",
    "bleu.sentence",
    "bleu.corpus",
    "rouge.rouge_1_score",
    "rouge.rouge_2_score",
    "rouge.rouge_3_score",
    "rouge.rouge_L_score",
    *[f"string-check{suffix}.string-check" for suffix in ("", "_2", "_3", "_4", "_5", "_6")],
    *[f"number-check{suffix}.number-check" for suffix in ("", "_2", "_3", "_4", "_5")],
    "tool-calling.function_name_accuracy",
    "tool-calling.function_name_and_args_accuracy",
]
ONLINE_SCORES = ["exact-match.exact-match", "f1.f1", "llm-judge.quality", "llm-judge.accuracy"]


@pytest.fixture(scope="module")
def parity() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_parity", PROJECT_ROOT / "bench" / "parity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_parity"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_parity_smoke_our_side(tmp_path: Path) -> None:
    report_path = tmp_path / "parity.json"
    cmd = [
        sys.executable,
        "bench/parity.py",
        "--smoke",
        "--reference-python",
        str(tmp_path / "no-such-python"),
        "--json",
        str(report_path),
    ]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=55)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "reference SDK not available: " in done.stdout
    assert "pip install nemo-platform-plugin==0.1.0" in done.stdout
    report = json.loads(report_path.read_text())
    cases = {case["case"]: case for case in report["cases"]}
    assert set(cases) == {"offline", "online"}
    for name, expected in (("offline", OFFLINE_SCORES), ("online", ONLINE_SCORES)):
        case = cases[name]
        produced = {score["name"] for score in case["ours"]["scores"]}
        assert set(expected) <= produced, sorted(set(expected) - produced)
        assert sorted(case["expected_scores"]) == sorted(expected)
        assert case["ours"]["counts"]["rows"] == 30
        assert case["ours"]["counts"]["ok"] == 30


def test_expected_names_follow_the_reference_keys(parity: ModuleType) -> None:
    assert parity.expected_score_names(parity.offline_metrics()) == OFFLINE_SCORES
    assert parity.expected_score_names(parity.online_metrics("http://127.0.0.1:1/v1")) == ONLINE_SCORES


def test_values_compare_within_the_documented_tolerance(parity: ModuleType) -> None:
    compare = parity.compare_values
    assert compare(0.2, 0.2) == "exact"
    assert compare(0.2, 0.19999999999999996) == "~1e-9"
    assert compare(40.0, 39.999999999999986) == "~1e-9"
    assert compare(0.0, 5e-17) == "~1e-9"  # absolute floor near zero
    assert compare(1.0, 1.0 + 1e-6) == "MISMATCH"
    assert compare(math.nan, math.nan) == "exact"
    assert compare(math.nan, "NaN") == "exact"
    assert compare(math.nan, 0.0) == "MISMATCH"
    assert compare(None, None) == "exact"
    assert compare(None, 0.0) == "MISMATCH"
    assert compare(3, 3.0) == "exact"
    assert compare("good", "good") == "exact"
    assert compare("good", "fair") == "MISMATCH"
    assert compare(parity.MISSING, 1.0) == "MISMATCH"


def _range_score(name: str, values_max: float, last_upper: float, last_count: int, count: int) -> dict:
    bins = [{"lower_bound": float(i), "upper_bound": float(i + 1), "count": 1 if i == 0 else 0} for i in range(9)]
    bins.append({"lower_bound": 9.0, "upper_bound": last_upper, "count": last_count})
    return {
        "name": name,
        "score_type": "range",
        "count": count,
        "nan_count": 0,
        "sum": 1.0,
        "mean": 0.5,
        "min": 0.0,
        "max": values_max,
        "std_dev": 0.5,
        "variance": 0.25,
        "percentiles": {p: 0.0 for p in parity_percentiles()},
        "histogram": {"bins": bins},
    }


def parity_percentiles() -> tuple[str, ...]:
    return ("p10", "p20", "p30", "p40", "p50", "p60", "p70", "p80", "p90", "p100")


def test_every_field_is_compared_and_mismatches_are_reported(parity: ModuleType) -> None:
    ours = _range_score("m.x", 10.0, 10.0, 1, 2)
    ref = json.loads(json.dumps(ours))
    ref["mean"] = 0.75
    comparison = parity.compare_scores("case", [ours], [ref])
    fields = {row[1] for row in comparison.rows}
    assert {"count", "nan_count", "sum", "mean", "min", "max", "std_dev", "variance", "score_type"} <= fields
    assert {f"percentiles.{p}" for p in parity_percentiles()} <= fields
    assert {"histogram.bins.len", "histogram.bins[9].upper_bound", "histogram.bins[9].count"} <= fields
    assert [(row[0], row[1]) for row in comparison.mismatches] == [("m.x", "mean")]


def test_scores_are_matched_by_name_and_missing_ones_mismatch(parity: ModuleType) -> None:
    a, b = _range_score("a.x", 10.0, 10.0, 1, 2), _range_score("b.x", 10.0, 10.0, 1, 2)
    comparison = parity.compare_scores("case", [b, a], [a])
    assert [row[:2] for row in comparison.mismatches] == [("b.x", "(score present)")]


def test_reference_histogram_losing_the_max_is_a_known_difference(parity: ModuleType) -> None:
    ours = _range_score("bleu.sentence", 100.00000000000004, 100.00000000000004, 1, 2)
    ref = _range_score("bleu.sentence", 100.00000000000004, 100.00000000000003, 0, 2)
    comparison = parity.compare_scores("case", [ours], [ref])
    assert comparison.mismatches == []
    assert comparison.known == {"bleu.sentence": "reference-histogram-drops-max"}
    ref["histogram"]["bins"][0]["count"] = 0  # any other bin difference is a real mismatch
    assert parity.compare_scores("case", [ours], [ref]).mismatches


def test_rubric_fields_are_compared(parity: ModuleType) -> None:
    def rubric(mode: str, description: str | None) -> dict:
        return {
            "name": "llm-judge.q",
            "score_type": "rubric",
            "count": 1,
            "nan_count": 0,
            "sum": 1.0,
            "mean": 1.0,
            "min": 1.0,
            "max": 1.0,
            "std_dev": 0.0,
            "variance": 0.0,
            "rubric_distribution": [
                {"label": "bad", "value": 0, "count": 0, "description": description},
                {"label": "good", "value": 1, "count": 1, "description": description},
            ],
            "mode_category": mode,
        }

    comparison = parity.compare_scores("case", [rubric("good", "fine")], [rubric("good", None)])
    assert comparison.mismatches == []
    assert comparison.known == {"llm-judge.q": "rubric-description"}
    fields = {row[1] for row in comparison.rows}
    assert {"mode_category", "rubric_distribution[1].count", "rubric_distribution[1].label"} <= fields
    assert parity.compare_scores("case", [rubric("bad", None)], [rubric("good", None)]).mismatches


def test_generated_data_is_deterministic(parity: ModuleType) -> None:
    assert parity.offline_rows(50) == parity.offline_rows(50)
    assert parity.online_rows(20) == parity.online_rows(20)
    rows = parity.offline_rows(200)
    assert any(row["output"] == "" for row in rows)
    assert any(not row["output"].isascii() for row in rows)
    assert all(isinstance(row["answer"], str) for row in rows)  # the reference rejects non-string text
