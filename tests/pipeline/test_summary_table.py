"""The end-of-run table: long score names keep the columns aligned; intervals and groups are shown."""

from __future__ import annotations

from pipeline.summary import format_summary_table


def score(name: str, mean: float, low: float | None, high: float | None) -> dict:
    return {"name": name, "count": 3, "nan_count": 1, "mean": mean, "min": 0.0, "max": 1.0,
            "ci_low": low, "ci_high": high, "confidence_level": 0.95}  # fmt: skip


def test_long_names_keep_columns_aligned_and_intervals_show() -> None:
    long_name = "llm-judge_2.helpfulness_of_the_answer_for_a_novice_reader"
    results = {
        "counts": {"rows": 4, "ok": 3, "errors": 1},
        "run": {"wall_time_s": 2.0},
        "aggregate_scores": {"scores": [score(long_name, 0.5, 0.1, 0.9), score("f1.f1", 0.25, None, None)]},
        "groups": [{"by": "category", "value": "geo", "scores": [score("f1.f1", 0.75, 0.5, 1.0)]}],
    }
    lines = format_summary_table(results).splitlines()
    header = next(line for line in lines if line.startswith("score"))
    rows = [line for line in lines if line.startswith((long_name, "f1.f1 "))]
    assert len(rows) == 2
    column = header.index("count") + len("count")
    assert all(row[column - 1] == "3" for row in rows)  # the count column ends at the same place
    assert "[0.1000, 0.9000]" in rows[0] and rows[1].split()[4] == "-"
    assert any(line.startswith("category=geo f1.f1") and "[0.5000, 1.0000]" in line for line in lines)
