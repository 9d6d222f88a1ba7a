"""Statistics end to end: intervals, clustered errors, group breakdowns and repeats through the real CLI.

Every expectation is computed here, independently, from the dataset or from the per-row
values in rows/ (numpy, scipy, and the sandwich form of the CR1 estimator); the default
runner, 2 local processes and the PortableRunner must give identical results.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from tests.pipeline.test_runners import grpc_binds, job_service  # noqa: F401 - fixtures, reused

LEVEL = 0.9
CATEGORIES = ["history", "science", "sport"]


def dataset(n: int = 120, seed: int = 4) -> list[dict[str, Any]]:
    """n rows, 4 per passage: passages differ in difficulty, so rows of a passage are correlated."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        passage = i // 4
        p = [0.15, 0.5, 0.95][passage % 3]
        right = rng.random() < p
        row: dict[str, Any] = {
            "id": i,
            "passage": f"p{passage}",
            "meta": {"source": "web" if passage % 2 else "book"},
            "answer": f"answer {i % 5}",
            "output": f"answer {i % 5}" if right else ("answer" if rng.random() < 0.5 else "nothing"),
        }
        if i % 10:  # every tenth row has no category: it is grouped under null
            row["category"] = CATEGORIES[(passage // 3) % 3]
        rows.append(row)
    return rows


def offline_config(path: Path | str, **statistics: Any) -> dict[str, Any]:
    return {
        "dataset": {"path": str(path)},
        "statistics": {"confidence_level": LEVEL, **statistics},
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
            {"type": "f1", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
            {"type": "bleu", "references": ["{{ item.answer }}"], "candidate": "{{ item.output }}"},
        ],
    }


@pytest.fixture
def data_path(write_jsonl, tmp_path: Path) -> str:
    rows = dataset()
    write_jsonl(rows[:50], "part-0.jsonl")  # two files: read in two splits, shuffled on every runner
    write_jsonl(rows[50:], "part-1.jsonl")
    return str(tmp_path / "part-*.jsonl")


def cr1(values: list[float], clusters: list[Any]) -> tuple[float, int]:
    """The clustered standard error as the intercept-only sandwich (X'X)^-1 B (X'X)^-1 · C/(C−1)."""
    y = np.asarray(values)
    u = y - y.mean()
    labels = sorted(set(clusters), key=repr)
    meat = sum(float(u[[i for i, c in enumerate(clusters) if c == label]].sum()) ** 2 for label in labels)
    c = len(labels)
    return math.sqrt(meat * c / (c - 1)) / len(y), c


def check_clustered(score: dict[str, Any], values: list[float], clusters: list[Any]) -> None:
    mean = float(np.mean(values))
    se, c = cr1(values, clusters)
    half = sps.t.ppf(1 - (1 - LEVEL) / 2, c - 1) * se
    assert score["count"] == len(values)
    assert score["mean"] == pytest.approx(mean, rel=1e-12)
    assert score["ci_method"] == "clustered-t"
    assert score["stderr"] == pytest.approx(se, rel=1e-10)
    low, high = score["range"]  # the interval is clipped to the score's range (ci_clipped says so)
    expected = (max(mean - half, low), min(mean + half, high))
    assert (score["ci_low"], score["ci_high"]) == pytest.approx(expected, rel=1e-10)
    assert score["ci_clipped"] == (expected != (mean - half, mean + half))
    assert score["sample_variance"] == pytest.approx(np.var(values, ddof=1), rel=1e-10)
    assert score["confidence_level"] == LEVEL


def test_naive_intervals_wilson_and_t(data_path: str, run_eval) -> None:
    result = run_eval(offline_config(data_path))
    assert result.code == 0, result.stderr
    em = result.score("exact-match.exact-match")
    values = [r["exact-match.exact-match"] for r in result.rows]
    successes, n = sum(values), len(values)
    z = sps.norm.ppf(1 - (1 - LEVEL) / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert em["ci_method"] == "wilson"
    assert (em["ci_low"], em["ci_high"]) == pytest.approx((centre - half, centre + half), rel=1e-12)
    assert em["stderr"] == pytest.approx(sps.sem(values), rel=1e-12)
    f1 = result.score("f1.f1")
    f1_values = [r["f1.f1"] for r in result.rows]
    assert f1["ci_method"] == "t"
    low, high = sps.t.interval(LEVEL, n - 1, loc=np.mean(f1_values), scale=sps.sem(f1_values))
    assert (f1["ci_low"], f1["ci_high"]) == pytest.approx((low, high), rel=1e-12)
    corpus = result.score("bleu.corpus")
    assert corpus["count"] == 1 and corpus["ci_method"] is None and corpus["stderr"] is None
    assert "groups" not in result.results
    assert result.results["counts"] == {"rows": 120, "ok": 120, "errors": 0}
    assert {r["sample_index"] for r in result.rows} == {0}


def statistics_run(run_eval, data_path: str, *extra: str):
    result = run_eval(offline_config(data_path, cluster_by="passage", group_by=["category", "meta.source"]), *extra)
    assert result.code == 0, result.stderr
    return result


def test_clustered_intervals_and_groups(data_path: str, run_eval) -> None:
    result = statistics_run(run_eval, data_path)
    rows = result.rows
    items = [__import__("json").loads(r["item"]) for r in rows]
    for name in ("exact-match.exact-match", "f1.f1", "bleu.sentence"):
        values = [r[name] for r in rows]
        check_clustered(result.score(name), values, [item["passage"] for item in items])
        naive = sps.sem(values)
        assert result.score(name)["stderr"] > naive  # correlated rows within a passage: wider than naive
    groups = result.results["groups"]
    expected_keys = [("category", c) for c in [*CATEGORIES, None]] + [("meta.source", s) for s in ("book", "web")]
    assert [(g["by"], g["value"]) for g in groups] == expected_keys
    for group in groups:
        if group["by"] == "category":
            members = [i for i, item in enumerate(items) if item.get("category") == group["value"]]
        else:
            members = [i for i, item in enumerate(items) if item["meta"]["source"] == group["value"]]
        assert group["counts"] == {"rows": len(members), "ok": len(members), "errors": 0}
        scores = {s["name"]: s for s in group["scores"]}
        assert list(scores) == [s["name"] for s in result.results["aggregate_scores"]["scores"]]
        for name in ("exact-match.exact-match", "f1.f1"):
            values = [rows[i][name] for i in members]
            check_clustered(scores[name], values, [items[i]["passage"] for i in members])
            assert scores[name]["count"] + scores[name]["nan_count"] == len(members)
            assert scores[name]["percentiles"]["p50"] == pytest.approx(np.percentile(values, 50, method="weibull"))
        assert scores["bleu.corpus"]["count"] == 1


@pytest.mark.slow
def test_runners_give_identical_statistics(data_path: str, run_eval, job_service: str) -> None:  # noqa: F811
    default = statistics_run(run_eval, data_path)
    multi = statistics_run(run_eval, data_path, "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    portable = statistics_run(
        run_eval, data_path, "--runner=PortableRunner", f"--job_endpoint={job_service}", "--environment_type=LOOPBACK"
    )
    for other in (multi, portable):
        assert other.results["aggregate_scores"] == default.results["aggregate_scores"]
        assert other.results["groups"] == default.results["groups"]
        assert other.results["counts"] == default.results["counts"]


def repeat_rows(n: int = 24) -> list[dict[str, Any]]:
    """Rows whose echoed prompt is right for some; "flaky" prompts fail once (one NaN sample of K).

    The first row is not flaky: the preflight sends it, and a failure there stops the run before it starts.
    """
    rows = []
    for i in range(n):
        question = f"q{i}" + (" flaky" if i % 4 == 1 else "")
        rows.append({"question": question, "answer": question if i % 3 else "other", "doc": f"d{i // 3}"})
    return rows


def test_repeats_online_sample_every_row_k_times(clean_server, model_target, write_jsonl, run_eval) -> None:
    k = 3
    clean_server.configure(rules=[{"match": "flaky", "fail_times": 1}], error_status=500)
    rows = repeat_rows()
    config = {
        "dataset": {"path": str(write_jsonl(rows))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"repeats": k, "max_retries": 0, "ignore_request_failure": True, "parallelism": 4},
        "statistics": {"confidence_level": LEVEL, "group_by": ["doc"]},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert clean_server.stats()["requests"] == len(rows) * k
    out = result.rows
    assert len(out) == len(rows) * k
    assert sorted((r["row_index"], r["sample_index"]) for r in out) == [
        (i, s) for i in range(len(rows)) for s in range(k)
    ]
    flaky = {i for i in range(len(rows)) if i % 4 == 1}
    errors = sum(r["status"] == "error" for r in out)
    assert errors == len(flaky)  # each flaky prompt's first request failed, whichever sample it was
    counts = result.results["counts"]
    assert counts == {"rows": len(rows), "ok": len(rows) * k - errors, "errors": errors, "samples": len(rows) * k}
    em = result.score("exact-match.exact-match")
    assert em["count"] + em["nan_count"] == len(rows) * k and em["nan_count"] == errors
    per_row = {i: [r["exact-match.exact-match"] for r in out if r["row_index"] == i] for i in range(len(rows))}
    kept = [v for values in per_row.values() for v in values if v == v]
    means = [np.mean([v for v in values if v == v]) for values in per_row.values()]
    assert em["mean"] == pytest.approx(np.mean(kept), rel=1e-12)
    se = sps.sem(means)
    half = sps.t.ppf(1 - (1 - LEVEL) / 2, len(means) - 1) * se
    assert em["ci_method"] == "t" and em["stderr"] == pytest.approx(se, rel=1e-12)
    assert (em["ci_low"], em["ci_high"]) == pytest.approx((em["mean"] - half, em["mean"] + half), rel=1e-12)
    assert em["within_row_variance"] == pytest.approx(
        np.mean([np.var([v for v in vs if v == v], ddof=1) for vs in per_row.values()]), abs=1e-15
    )
    complete = [vs for vs in per_row.values() if all(v == v for v in vs)]
    assert len(complete) == len(rows) - len(flaky)
    for j in range(1, k + 1):
        at = np.mean([1 - math.comb(k - int(sum(vs)), j) / math.comb(k, j) for vs in complete])
        hat = np.mean([math.comb(int(sum(vs)), j) / math.comb(k, j) for vs in complete])
        assert em["pass_at_k"][str(j)] == pytest.approx(at, rel=1e-12)
        assert em["pass_hat_k"][str(j)] == pytest.approx(hat, rel=1e-12)
    group = result.results["groups"][0]
    assert group["value"] == "d0" and group["counts"]["samples"] == 3 * k and group["counts"]["rows"] == 3


def test_repeats_with_clusters_use_per_row_means(data_path: str, run_eval) -> None:
    config = offline_config(data_path, cluster_by="passage")
    config["params"] = {"repeats": 2}
    result = run_eval(config)
    assert result.code == 0, result.stderr
    rows = [r for r in result.rows if r["sample_index"] == 0]
    items = [__import__("json").loads(r["item"]) for r in rows]
    assert len(result.rows) == 240 and result.results["counts"]["samples"] == 240
    values = [r["f1.f1"] for r in rows]  # offline, both samples score the same: the row mean is the value
    em = result.score("f1.f1")
    check_clustered(
        {**em, "count": 120, "sample_variance": np.var(values, ddof=1)}, values, [i["passage"] for i in items]
    )
    assert em["within_row_variance"] == 0.0 and "pass_at_k" not in em


@pytest.mark.parametrize(
    ("statistics", "params", "message"),
    [
        ({"confidence_level": 1.0}, {}, "'statistics.confidence_level': Input should be less than 1"),
        ({"group_by": ["a..b"]}, {}, "is not a field path"),
        ({"cluster_by": "x y"}, {}, "is not a field path"),
        ({"group_by": ["a", "a"]}, {}, "more than once"),
        ({"clusterby": "a"}, {}, "unknown key 'statistics.clusterby'"),
        ({}, {"repeats": 0}, "'params.repeats': Input should be greater than or equal to 1"),
    ],
)
def test_bad_statistics_config_is_refused(write_jsonl, run_eval, statistics, params, message) -> None:
    config = offline_config(write_jsonl(dataset(4)))
    config["statistics"] = statistics
    config["params"] = params
    result = run_eval(config)
    assert result.code == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_many_groups_keep_results_json_small_and_every_group_in_groups_parquet(write_jsonl, run_eval, tmp_path):
    """A group per row (3,000 values): results.json lists the 1,000 largest, groups.parquet all of them."""
    import json

    import pyarrow.parquet as pq

    rows = [
        {"doc": f"d{i // 2 if i < 400 else i}", "answer": "a", "output": "a" if i % 3 else "b"} for i in range(3000)
    ]
    config = offline_config(write_jsonl(rows), group_by=["doc"])
    out = tmp_path / "groups"
    result = run_eval(config, output=out)
    assert result.code == 0, result.stderr
    results = json.loads((out / "results.json").read_text())
    expected = {}
    for i, row in enumerate(rows):
        expected.setdefault(row["doc"], []).append(1.0 if i % 3 else 0.0)
    assert results["groups_summary"]["total"] == len(expected) == 2800
    assert results["groups_summary"]["listed"] == len(results["groups"]) == 1000
    assert results["groups_summary"]["rest"]["groups"] == 1800 and results["groups_summary"]["file"] == "groups.parquet"
    listed = {g["value"]: g for g in results["groups"]}
    assert all(listed[f"d{j}"]["counts"]["rows"] == 2 for j in range(200))  # the 200 two-row groups come first
    table = pq.read_table(out / "groups.parquet").to_pylist()
    assert len(table) == 2800
    for record in table:
        values = expected[json.loads(record["value"])]
        assert record["by"] == "doc" and record["rows"] == len(values)
        assert record["exact-match.exact-match.mean"] == pytest.approx(sum(values) / len(values))
    assert (out / "results.json").stat().st_size < 20_000_000
    # a rerun with few groups leaves no groups.parquet of the earlier run behind
    again = run_eval(offline_config(write_jsonl(rows[:10], "few.jsonl"), group_by=["doc"]), "--overwrite", output=out)
    assert again.code == 0, again.stderr
    assert not (out / "groups.parquet").exists() and "groups_summary" not in json.loads(
        (out / "results.json").read_text()
    )
