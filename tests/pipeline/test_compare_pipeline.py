"""``python -m pipeline.compare`` end to end over real runs of ``python -m pipeline.run`` (offline and online).

Expected values are computed here from the datasets the tests write: per-row exact-match and
F1 by hand (answers are two tokens, outputs are right, half right or wrong), then the paired
statistics with numpy and scipy.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy import stats

from pipeline.compare import main as compare_main
from pipeline.history import main as history_main
from pipeline.run import main as run_main

pytestmark = pytest.mark.slow

N = 240


def _answer(i: int) -> str:
    return f"alpha{i} beta{i}"


def _output(i: int, kind: str) -> str:
    return {"right": _answer(i), "half": f"alpha{i} gamma", "wrong": "zzz"}[kind]


def _scores(kind: str) -> tuple[float, float]:
    """(exact-match, f1) by hand: half right shares one of two tokens, so P = R = F1 = 0.5."""
    return {"right": (1.0, 1.0), "half": (0.0, 0.5), "wrong": (0.0, 0.0)}[kind]


def _kinds(variant: str) -> list[str]:
    if variant == "a":  # 90% right
        return ["wrong" if i % 10 == 0 else "half" if i % 10 == 5 else "right" for i in range(N)]
    if variant == "b":  # a large drop
        return ["right" if i % 2 == 0 else "wrong" if i % 4 == 1 else "half" for i in range(N)]
    kinds = _kinds("a")  # "c": a small drop
    for i in (1, 2, 3, 11, 12):
        kinds[i] = "wrong"
    kinds[10] = "right"
    return kinds


def _rows(variant: str) -> list[dict[str, Any]]:
    return [
        {"id": f"q{i}", "question": f"question {i}", "answer": _answer(i), "output": _output(i, kind)}
        for i, kind in enumerate(_kinds(variant))
    ]


def _write(path: Path, rows: list[dict[str, Any]], extra_lines: tuple[str, ...] = ()) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(line + "\n" for line in extra_lines))
    return path


def _config(tmp: Path, name: str, dataset: Path) -> Path:
    config = {
        "dataset": {"path": str(dataset)},
        "params": {"ignore_request_failure": True},
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
            {"type": "f1", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
        ],
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(config: Path, out: Path, *extra: str) -> Path:
    assert run_main(["--config", str(config), "--output", str(out), "--progress_interval", "0", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    history = tmp / "history"
    b_rows = _rows("b")
    shuffled = b_rows[:]
    random.Random(4).shuffle(shuffled)
    partial = [r for r in b_rows if r["id"] not in {"q0", "q1", "q2", "q3", "q4"}] + [
        {"id": f"new{i}", "question": "?", "answer": "x y", "output": "x y"} for i in range(3)
    ]
    with_bad_row = [json.dumps(r) for r in b_rows]
    with_bad_row[7] = "{not json"
    duplicated = [*b_rows, {**b_rows[3], "output": "zzz"}]
    datasets = {
        "a": _write(tmp / "a.jsonl", _rows("a")),
        "b": _write(tmp / "b.jsonl", b_rows),
        "c": _write(tmp / "c.jsonl", _rows("c")),
        "b_shuffled": _write(tmp / "b_shuffled.jsonl", shuffled),
        "b_partial": _write(tmp / "b_partial.jsonl", partial, ("{broken line", "[1, 2]")),
        "b_dup": _write(tmp / "b_dup.jsonl", duplicated),
    }
    (tmp / "b_bad.jsonl").write_text("\n".join(with_bad_row) + "\n")
    datasets["b_bad"] = tmp / "b_bad.jsonl"
    # The history: "a" twice (the same evaluation on two days) and "b" (another dataset: another eval_hash).
    out = {}
    for name, path in datasets.items():
        recorded = ("--history", str(history)) if name in ("a", "b") else ()
        out[name] = _run(_config(tmp, name, path), tmp / f"out_{name}", *recorded)
    out["a2"] = _run(tmp / "a.yaml", tmp / "out_a2", "--history", str(history))
    out["history"] = history
    return out


def _compare(capsys: pytest.CaptureFixture[str], out: Path, *args: str) -> tuple[int, dict[str, Any], str, str]:
    capsys.readouterr()
    code = compare_main([*args, "--output", str(out)])
    captured = capsys.readouterr()
    path = out / "comparison.json"
    return code, json.loads(path.read_text()) if path.exists() else {}, captured.out, captured.err


def _expected(base: list[float], cand: list[float]) -> dict[str, float]:
    b, c = np.array(base), np.array(cand)
    d = c - b
    test = stats.ttest_rel(c, b)
    ci = test.confidence_interval(0.95)
    return {
        "delta": d.mean(),
        "stderr": d.std(ddof=1) / math.sqrt(len(d)),
        "low": ci.low,
        "high": ci.high,
        "p": test.pvalue,
        "improved": int((d > 0).sum()),
        "regressed": int((d < 0).sum()),
    }


def test_no_go_with_values_from_an_independent_computation(runs, capsys, tmp_path) -> None:
    code, cmp, _, err = _compare(capsys, tmp_path / "cmp", "--baseline", str(runs["a"]), "--candidate", str(runs["b"]))
    assert code == 1 and cmp["verdict"] == "NO-GO"
    base, cand = [_scores(k) for k in _kinds("a")], [_scores(k) for k in _kinds("b")]
    em, f1, ok = cmp["scores"]
    assert (em["name"], f1["name"], ok["name"]) == ("exact-match.exact-match", "f1.f1", "ok_rate")
    assert ok["verdict"] == "GO" and ok["n_paired"] == N and ok["delta"] == 0  # no row failed on either side
    assert (em["margin"], f1["margin"], ok["margin"]) == (0.01, 0.01, 0.01)  # 1% of [0, 1]
    for position, score in enumerate((em, f1)):
        want = _expected([s[position] for s in base], [s[position] for s in cand])
        assert score["n_paired"] == N and score["delta"] == pytest.approx(want["delta"])
        assert score["delta_stderr"] == pytest.approx(want["stderr"])
        assert (score["ci_low"], score["ci_high"]) == (pytest.approx(want["low"]), pytest.approx(want["high"]))
        assert (score["improved"], score["regressed"]) == (want["improved"], want["regressed"])
        assert score["verdict"] == "NO-GO"
        d = np.array([c[position] - b[position] for b, c in zip(base, cand, strict=True)])
        want_reg = stats.ttest_1samp(d, -0.01, alternative="less").pvalue
        assert score["p_regression"] == pytest.approx(want_reg, rel=1e-9)
        want_ni = stats.ttest_1samp(d, -0.01, alternative="greater").pvalue
        assert score["p_noninferiority"] == pytest.approx(want_ni, rel=1e-9)
    # Holm over the two scores (ok_rate, with se = 0 inside its margin, is outside the family)
    low, high = sorted((em, f1), key=lambda r: r["p_regression"])
    assert low["p_regression_adjusted"] == pytest.approx(min(1.0, 2 * low["p_regression"]), rel=1e-9)
    assert high["p_regression_adjusted"] == pytest.approx(max(low["p_regression_adjusted"], high["p_regression"]))
    assert ok["p_regression"] == ok["p_regression_adjusted"] == 1.0
    assert f1["test"] == "paired-t" and f1["p_value"] == pytest.approx(
        stats.ttest_rel([s[1] for s in cand], [s[1] for s in base]).pvalue
    )
    b10, c01 = em["regressed"], em["improved"]
    tail = sum(math.comb(b10 + c01, k) for k in range(min(b10, c01) + 1)) / 2 ** (b10 + c01)
    assert em["p_value"] == pytest.approx(min(1.0, 2 * tail))  # two-sided McNemar, for information
    flips = [json.loads(line) for line in (tmp_path / "cmp" / "flips.jsonl").read_text().splitlines()]
    changed = [i for i in range(N) if base[i] != cand[i]]
    assert sorted(f["key"] for f in flips) == changed and cmp["flips"]["rows"] == len(changed)
    flip = next(f for f in flips if f["key"] == 10)  # wrong -> right
    assert flip["improved"] == ["exact-match.exact-match", "f1.f1"] and flip["regressed"] == []
    assert flip["item"]["id"] == "q10" and flip["baseline_scores"] == {"exact-match.exact-match": 0.0, "f1.f1": 0.0}
    flip = next(f for f in flips if f["key"] == 5)  # half right -> wrong: only f1 can drop
    assert flip["regressed"] == ["f1.f1"] and flip["improved"] == []
    assert err.startswith("NO-GO: 2 of 3 gated scores") and str(tmp_path / "cmp" / "flips.jsonl") in err
    assert f"{em['delta']:+.4g}" in err and f"[{em['ci_low']:+.4g}, {em['ci_high']:+.4g}]" in err
    page = (tmp_path / "cmp" / "report.html").read_text()
    assert "NO-GO" in page and not re.search(r"""(src|href)\s*=\s*["']?https?:|url\(\s*https?:""", page)


def test_pairing_by_key_is_independent_of_row_order(runs, capsys, tmp_path) -> None:
    args = ("--baseline", str(runs["a"]), "--key", "id")
    _, in_order, _, _ = _compare(capsys, tmp_path / "ordered", *args, "--candidate", str(runs["b"]))
    _, shuffled, _, _ = _compare(capsys, tmp_path / "shuffled", *args, "--candidate", str(runs["b_shuffled"]))
    _, by_index, _, _ = _compare(
        capsys, tmp_path / "index", "--baseline", str(runs["a"]), "--candidate", str(runs["b"])
    )
    assert shuffled["counts"] == in_order["counts"] == by_index["counts"]
    for x, y in zip(shuffled["scores"], in_order["scores"], strict=True):
        for field in ("n_paired", "improved", "regressed", "test", "verdict"):
            assert x[field] == y[field]
        for field in ("delta", "delta_stderr", "ci_low", "ci_high", "p_value", "mde", "baseline_mean"):
            assert x[field] == pytest.approx(y[field], rel=1e-9)
    keys = [
        sorted(json.loads(line)["key"] for line in (tmp_path / d / "flips.jsonl").read_text().splitlines())
        for d in ("ordered", "shuffled")
    ]
    assert keys[0] == keys[1] and keys[0][0].startswith("q")


def test_unpaired_and_failed_rows_are_counted(runs, capsys, tmp_path) -> None:
    args = ("--baseline", str(runs["a"]), "--candidate", str(runs["b_partial"]), "--key", "id")
    code, cmp, _, err = _compare(capsys, tmp_path / "partial", *args)
    assert cmp["counts"] == {
        "baseline_rows": N,
        "candidate_rows": N - 5 + 3 + 2,
        "paired": N - 5,
        "unpaired_baseline": 5,
        "unpaired_candidate": 3,
        "failed_baseline": 0,
        "failed_candidate": 2,  # two unparseable lines
    }
    assert all(s["n_paired"] == N - 5 and s["unpaired_baseline"] == 5 for s in cmp["scores"])
    assert "5 baseline and 3 candidate rows had no partner" in err
    code, cmp, _, _ = _compare(
        capsys, tmp_path / "bad", "--baseline", str(runs["a"]), "--candidate", str(runs["b_bad"])
    )
    assert cmp["counts"]["paired"] == N - 1 and cmp["counts"]["failed_candidate"] == 1
    base, cand = [_scores(k)[0] for k in _kinds("a")], [_scores(k)[0] for k in _kinds("b")]
    keep = [i for i in range(N) if i != 7]
    want = _expected([base[i] for i in keep], [cand[i] for i in keep])
    assert cmp["scores"][0]["delta"] == pytest.approx(want["delta"])


def test_runs_over_different_datasets_are_refused_unless_allowed(runs, capsys, tmp_path) -> None:
    """Half the rows are other questions: the deltas would compare two datasets, so exit 2 naming both."""
    half = _rows("a")[: N // 2] + [
        {"id": f"other{i}", "question": "?", "answer": "x y", "output": "x y"} for i in range(N // 2)
    ]
    dataset = _write(tmp_path / "half.jsonl", half)
    other = _run(_config(tmp_path, "half", dataset), tmp_path / "out_half")
    args = ("--baseline", str(runs["a"]), "--candidate", str(other), "--key", "id")
    code, cmp, _, err = _compare(capsys, tmp_path / "refused", *args)
    assert code == 2 and cmp == {}, err
    assert "the runs read different datasets" in err and "a.jsonl" in err and str(dataset) in err
    assert f"{N // 2} rows pair (50% of the baseline's {N}, 50% of the candidate's {N})" in err
    assert "--allow_dataset_change" in err and "Traceback" not in err
    code, cmp, _, err = _compare(capsys, tmp_path / "allowed", *args, "--allow_dataset_change")
    assert code in (0, 1, 4) and cmp["counts"]["paired"] == N // 2
    assert any(w.startswith("the runs read different datasets") for w in cmp["warnings"])
    assert "warning: the runs read different datasets" in err  # on stderr, not only in comparison.json


def test_a_duplicate_key_is_an_error_naming_it(runs, capsys, tmp_path) -> None:
    args = ("--baseline", str(runs["a"]), "--candidate", str(runs["b_dup"]), "--key", "id")
    code, cmp, out, err = _compare(capsys, tmp_path / "dup", *args)
    assert code == 2 and cmp == {}
    assert "--key 'id' is not unique in the candidate run" in err and '"q3" is on rows 3 and 240' in err
    assert "Traceback" not in err
    code, _, _, err = _compare(capsys, tmp_path / "nokey", *args[:4], "--key", "nope")
    assert code == 2 and f"{N} rows of the baseline run" in err and "no field 'nope'" in err


def test_go_inconclusive_and_policy(runs, capsys, tmp_path) -> None:
    code, cmp, out, _ = _compare(capsys, tmp_path / "go", "--baseline", str(runs["a"]), "--candidate", str(runs["a2"]))
    assert code == 0 and cmp["verdict"] == "GO" and all(s["delta"] == 0 for s in cmp["scores"])
    assert "GO: every gated score" in out
    code, cmp, _, err = _compare(capsys, tmp_path / "inc", "--baseline", str(runs["a"]), "--candidate", str(runs["c"]))
    assert code == 4 and cmp["verdict"] == "INCONCLUSIVE"
    em = cmp["scores"][0]
    assert em["ci_low"] < 0 < em["ci_high"] and em["rows_needed"] > N
    assert f"about {em['rows_needed']:,} paired rows would decide it" in err
    policy = tmp_path / "gate.yaml"
    policy.write_text("alpha: 0.05\ncorrection: holm\nscores:\n  exact-match.exact-match: {max_drop: 0.6}\n")
    args = ("--baseline", str(runs["a"]), "--candidate", str(runs["b"]), "--policy", str(policy))
    code, cmp, _, _ = _compare(capsys, tmp_path / "lenient", *args)
    assert code == 0 and cmp["scores"][0]["verdict"] == "GO" and cmp["scores"][1]["verdict"] is None
    assert cmp["scores"][2]["name"] == "ok_rate" and cmp["scores"][2]["verdict"] == "GO"  # always gated
    assert cmp["policy"]["scores"] == {"exact-match.exact-match": {"max_drop": 0.6}}
    policy.write_text("scores:\n  exact-match: {max_drop: 0.1}\n")
    code, _, _, err = _compare(capsys, tmp_path / "typo", *args)
    assert code == 2 and "gates 'exact-match'" in err and "exact-match.exact-match, f1.f1" in err
    policy.write_text("alpha: 0.05\nmax_drop: 0.1\n")
    code, _, _, err = _compare(capsys, tmp_path / "badkey", *args)
    assert code == 2 and "unknown key 'max_drop'" in err
    code, _, _, err = _compare(capsys, tmp_path / "nodir", "--baseline", str(tmp_path), "--candidate", str(runs["b"]))
    assert code == 2 and "has no results.json" in err


def test_latest_baseline_from_the_history(runs, capsys, tmp_path) -> None:
    history = str(runs["history"])
    lines = (runs["history"] / "runs.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["output"] for r in records] == [str(runs["a"]), str(runs["b"]), str(runs["a2"])]
    assert records[0]["eval_hash"] == records[2]["eval_hash"] != records[1]["eval_hash"]
    a2 = json.loads((runs["a2"] / "results.json").read_text())["provenance"]
    assert records[2]["run_id"] == a2["run_id"] and a2["dataset"]["rows"] == N
    args = ("--baseline", "latest", "--history", history)
    code, cmp, _, _ = _compare(capsys, tmp_path / "latest", *args, "--candidate", str(runs["a2"]))
    assert code == 0 and cmp["baseline"]["output"] == str(runs["a"]) and cmp["verdict"] == "GO"
    code, cmp, out, _ = _compare(capsys, tmp_path / "none", *args, "--candidate", str(runs["b"]))
    assert code == 0 and cmp == {} and out.startswith("no baseline:")
    capsys.readouterr()
    assert history_main([history]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 4 and "exact-match.exact-match" in table[0] and "0.8000 [" in table[1]
    assert history_main([history, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("run_id,started_at,finished_at,output")


def test_online_runs_record_models_seen_and_gate_against_the_latest(tmp_path, clean_server, capsys) -> None:
    rows = [{"id": f"r{i}", "question": f"Q{i}?", "answer": f"Q{i}?"} for i in range(120)]
    dataset = _write(tmp_path / "qa.jsonl", rows)

    def config(model: str) -> Path:
        path = tmp_path / f"{model}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "dataset": {"path": str(dataset)},
                    "target": {"model": {"url": clean_server.base_url, "name": model}},
                    "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
                    "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
                }
            )
        )
        return path

    history = tmp_path / "history"
    _run(config("model-a"), tmp_path / "a", "--history", str(history))  # the server echoes: all right
    clean_server.configure(rules=[{"match": f"Q{i}?", "reply": "wrong"} for i in range(0, 120, 3)])
    _run(config("model-b"), tmp_path / "b", "--history", str(history))
    provenance = [json.loads((tmp_path / d / "results.json").read_text())["provenance"] for d in ("a", "b")]
    assert provenance[0]["eval_hash"] == provenance[1]["eval_hash"]  # only the target differs
    assert provenance[1]["models_seen"] == [{"model": "model-b", "system_fingerprint": None, "count": 120}]
    code, cmp, _, err = _compare(
        capsys, tmp_path / "cmp", "--baseline", "latest", "--history", str(history), "--candidate", str(tmp_path / "b")
    )
    assert code == 1 and cmp["baseline"]["output"] == str(tmp_path / "a")
    assert cmp["scores"][0]["regressed"] == 40 and cmp["scores"][0]["delta"] == pytest.approx(-40 / 120)
    flips = [json.loads(line) for line in (tmp_path / "cmp" / "flips.jsonl").read_text().splitlines()]
    assert len(flips) == 40 and {f["candidate_output"] for f in flips} == {"wrong"}
    assert all(f["baseline_output"] == f["item"]["question"] for f in flips)
    assert "NO-GO" in err


def _append_many(history: str, worker: int, count: int) -> None:
    from pipeline.history import append_run

    for i in range(count):
        results = {"status": "completed", "counts": {"rows": i}, "aggregate_scores": {"scores": []}, "config": {}}
        results["provenance"] = {"run_id": f"w{worker}-{i}", "finished_at": f"2025-01-01T00:00:{i:02d}.000Z"}
        append_run(history, results, f"out/{worker}/{i}" + "/" * 6000)  # 6 kB lines: beyond PIPE_BUF


def test_runs_finishing_together_append_whole_lines(tmp_path) -> None:
    import multiprocessing

    history = str(tmp_path / "history")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(history, w, 40)) for w in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
    lines = (tmp_path / "history" / "runs.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line parses: no interleaved bytes
    assert sorted(r["run_id"] for r in records) == sorted(f"w{w}-{i}" for w in range(4) for i in range(40))


def test_git_commit_from_loose_and_packed_refs(tmp_path) -> None:
    from pipeline.provenance import git_commit

    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text("a" * 40 + "\n")
    assert git_commit(tmp_path) == "a" * 40
    (git / "refs" / "heads" / "main").unlink()
    (git / "packed-refs").write_text("# pack-refs with: peeled\n" + "b" * 40 + " refs/heads/main\n")
    assert git_commit(tmp_path) == "b" * 40
    (git / "HEAD").write_text("c" * 40 + "\n")  # detached
    assert git_commit(tmp_path) == "c" * 40
    assert git_commit(tmp_path / "elsewhere") is None


# ---- The revised gate through the real CLI (CONTRACT "Gating, revised") ----


def _online_config(tmp: Path, name: str, dataset: Path, url: str, **params: Any) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "dataset": {"path": str(dataset)},
                "target": {"model": {"url": url, "name": name}},
                "params": {"ignore_request_failure": True, "max_retries": 0, **params},
                "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
                "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
            }
        )
    )
    return path


def _questions(tmp: Path, n: int) -> Path:
    return _write(tmp / "qa.jsonl", [{"id": f"r{i}", "question": f"Q{i}?", "answer": f"Q{i}?"} for i in range(n)])


def test_failed_rows_make_no_go_through_ok_rate(tmp_path, clean_server, capsys) -> None:
    dataset = _questions(tmp_path, 40)
    # Rows 1 to 19 (not the first: the preflight sends it, and a refusal there stops the run before it starts).
    clean_server.configure(rules=[{"match": f"Q{i}?", "reply": "wrong"} for i in range(1, 20)])
    _run(_online_config(tmp_path, "base", dataset, clean_server.base_url), tmp_path / "a")
    # The candidate fails exactly the 19 rows the baseline got wrong: every pair that is ok on both sides is right.
    clean_server.configure(rules=[{"match": f"Q{i}?", "status": 400} for i in range(1, 20)])
    _run(_online_config(tmp_path, "cand", dataset, clean_server.base_url), tmp_path / "b")  # 47.5% failed: exit 0
    code, cmp, _, err = _compare(
        capsys, tmp_path / "cmp", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b")
    )
    em, ok = cmp["scores"]
    assert em["n_paired"] == 21 and em["delta"] == 0 and em["verdict"] == "GO"  # the old gate said GO here
    assert ok["name"] == "ok_rate" and ok["n_paired"] == 40 and ok["regressed"] == 19
    assert ok["delta"] == pytest.approx(-19 / 40) and ok["verdict"] == "NO-GO"
    assert code == 1 and cmp["verdict"] == "NO-GO" and "ok_rate" in err
    assert cmp["counts"]["failed_candidate"] == 19 and "counted in ok_rate" in err


def test_most_rows_failing_fails_the_run_and_the_comparison_refuses_it(tmp_path, clean_server, capsys) -> None:
    dataset = _questions(tmp_path, 40)
    _run(_online_config(tmp_path, "base", dataset, clean_server.base_url), tmp_path / "a")
    clean_server.configure(rules=[{"match": f"Q{i}?", "status": 404} for i in range(1, 22)])  # the first row answers
    config = _online_config(tmp_path, "cand", dataset, clean_server.base_url)  # no max_error_rate: the default 0.5
    capsys.readouterr()
    assert run_main(["--config", str(config), "--output", str(tmp_path / "b"), "--progress_interval", "0"]) == 1
    assert "21 of 40 rows failed (52.5%), more than params.max_error_rate (50.0%)" in capsys.readouterr().err
    assert json.loads((tmp_path / "b" / "results.json").read_text())["status"] == "failed"
    code, cmp, _, err = _compare(
        capsys, tmp_path / "cmp", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b")
    )
    assert code == 2 and cmp == {}
    assert f"the candidate run {str(tmp_path / 'b')!r} did not complete: its status is 'failed'" in err


def _grouped_rows(variant: str) -> list[dict[str, Any]]:
    """600 rows: "arith" (100) collapses from 75 to 45 right in "b", "text" (498) gains 30, "misc" (2) is tiny."""
    rows = []
    for i in range(600):
        category = "arith" if i < 100 else "misc" if i >= 598 else "text"
        if category == "arith":
            right = i < 75 if variant == "a" else i < 45
        elif category == "text":
            right = (i % 5 != 0) if variant == "a" else (i % 5 != 0 or i < 250)
        else:
            right = None  # f1 0.5 and 0: a t interval of [-2.93, 3.43] before clipping
        rows.append(
            {
                "id": f"q{i}",
                "category": category,
                "half": i % 2,
                "answer": _answer(i),
                "output": _output(i, "half" if right is None and i == 598 else "right" if right else "wrong"),
            }
        )
    return rows


def _grouped_config(tmp: Path, name: str, dataset: Path) -> Path:
    config = {
        "dataset": {"path": str(dataset)},
        "statistics": {"group_by": ["category"]},
        "metrics": [
            {"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
            {"type": "f1", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
        ],
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_collapsed_group_is_no_go_under_a_fine_overall_score_and_intervals_stay_in_range(tmp_path, capsys) -> None:
    for variant in "ab":
        dataset = _write(tmp_path / f"{variant}.jsonl", _grouped_rows(variant))
        _run(_grouped_config(tmp_path, variant, dataset), tmp_path / variant)
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    misc = next(g for g in results["groups"] if g["value"] == "misc")
    f1 = next(s for s in misc["scores"] if s["name"] == "f1.f1")
    half = stats.t.ppf(0.975, 1) * 0.25  # sd sqrt(0.125), n 2: stderr 0.25
    assert 0.25 - half < -2.9 and f1["ci_method"] == "t" and f1["mean"] == 0.25
    assert (f1["ci_low"], f1["ci_high"], f1["ci_clipped"], f1["range"]) == (0.0, 1.0, True, [0.0, 1.0])
    overall = next(s for s in results["aggregate_scores"]["scores"] if s["name"] == "f1.f1")
    assert overall["ci_clipped"] is False and overall["ci_low"] > 0
    policy = tmp_path / "gate.yaml"
    policy.write_text(yaml.safe_dump({"scores": {"exact-match.exact-match": {"max_drop": 0.05}}}))
    args = ("--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b"), "--policy", str(policy))
    code, cmp, out, err = _compare(capsys, tmp_path / "cmp", *args)
    em = cmp["scores"][0]
    assert em["delta"] == 0 and em["verdict"] == "GO"  # overall the candidate is as good
    groups = {g["value"]: g for g in cmp["groups"]}
    assert [g["value"] for g in cmp["groups"]] == ["arith", "misc", "text"] and groups["arith"]["n_paired"] == 100
    arith = groups["arith"]["scores"][0]
    assert arith["delta"] == pytest.approx(-0.3) and arith["verdict"] == "NO-GO"
    assert groups["text"]["scores"][0]["verdict"] == "GO"
    assert not groups["misc"]["scores"][0]["gated"] and groups["misc"]["scores"][0]["verdict"] is None
    # the group's p joins the Holm family: exact-match overall, arith, text (ok_rate everywhere is certain)
    family = [em, arith, groups["text"]["scores"][0]]
    raws = sorted(r["p_regression"] for r in family)
    assert arith["p_regression_adjusted"] == pytest.approx(min(1.0, 3 * raws[0]))
    assert code == 1 and cmp["verdict"] == "NO-GO" and 'category="arith": exact-match.exact-match' in err
    assert '  category="arith": exact-match.exact-match' in out and "Holm-adjusted over" in out
    code, cmp, _, _ = _compare(capsys, tmp_path / "half", *args, "--group_by", "half")
    assert [g["value"] for g in cmp["groups"]] == [0, 1] and cmp["group_by"] == ["half"]


def test_latest_is_the_last_accepted_run_so_a_two_night_regression_is_no_go_both_nights(
    tmp_path, clean_server, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    dataset = _questions(tmp_path, 120)
    history = "history"  # relative: recorded absolute

    def night(name: str, wrong: range) -> str:
        clean_server.configure(rules=[{"match": f"Q{i}?", "reply": "wrong"} for i in wrong])
        _run(_online_config(tmp_path, "model", dataset, clean_server.base_url), Path(name), "--history", history)
        return name

    def gate(candidate: str, baseline: str = "latest") -> tuple[int, dict[str, Any], str, str]:
        args = ("--baseline", baseline, "--history", history, "--candidate", candidate)
        return _compare(capsys, tmp_path / f"cmp_{candidate}_{baseline}", *args)

    code, cmp, out, _ = gate(night("night1", range(0)))
    assert code == 0 and cmp == {} and out.startswith("no baseline:")
    code, cmp, _, _ = gate(night("night2", range(0, 120, 4)))
    assert code == 1 and cmp["baseline"]["output"] == str(tmp_path / "night1")
    code, cmp, _, _ = gate(night("night3", range(0, 120, 4)))  # the same regression, a second night
    assert code == 1 and cmp["verdict"] == "NO-GO" and cmp["baseline"]["output"] == str(tmp_path / "night1")
    code, cmp, _, _ = gate("night3", "previous")  # the last run whatever its verdict: night2, the same replies
    assert code == 0 and cmp["verdict"] == "GO" and cmp["baseline"]["output"] == str(tmp_path / "night2")
    lines = [json.loads(line) for line in (tmp_path / "history" / "runs.jsonl").read_text().splitlines()]
    outputs = [r["output"] for r in lines if "output" in r]
    assert outputs == [str(tmp_path / n) for n in ("night1", "night2", "night3")]  # absolute
    verdicts = [(r["verdict"], r["baseline_run_id"]) for r in lines if "compared_at" in r]
    ids = [r["run_id"] for r in lines if "output" in r]
    assert verdicts == [(None, None), ("NO-GO", ids[0]), ("NO-GO", ids[0]), ("GO", ids[1])]
    # A later run written over night1's directory is not the run the history recorded there.
    _run(_online_config(tmp_path, "model", dataset, clean_server.base_url), Path("night1"), "--overwrite")
    code, _, _, err = gate("night3")
    assert code == 2 and f"records run {ids[0]} at {str(tmp_path / 'night1')!r}" in err and "written over" in err


def test_incomplete_runs_and_bad_histories_are_refused(runs, capsys, tmp_path) -> None:
    import shutil

    stopped = tmp_path / "stopped"
    shutil.copytree(runs["a2"], stopped)
    results = json.loads((stopped / "results.json").read_text())
    (stopped / "results.json").write_text(json.dumps({**results, "complete": False, "stopped": "budget"}))
    code, cmp, _, err = _compare(capsys, tmp_path / "cmp", "--baseline", str(runs["a"]), "--candidate", str(stopped))
    assert code == 4 and cmp["verdict"] == "INCONCLUSIVE" and all(s["verdict"] == "GO" for s in cmp["scores"])
    assert "the candidate run stopped at its budget" in err and cmp["candidate"]["stopped"] == "budget"
    (stopped / "results.json").write_text(json.dumps({**results, "status": "running"}))
    code, _, _, err = _compare(capsys, tmp_path / "cmp2", "--baseline", str(stopped), "--candidate", str(runs["a"]))
    assert code == 2 and "the baseline run" in err and "its status is 'running'" in err
    args = ("--baseline", "latest", "--candidate", str(runs["a2"]))
    code, _, out, err = _compare(capsys, tmp_path / "h1", *args, "--history", str(tmp_path / "nowhere"))
    assert code == 2 and "does not exist" in err and "no baseline" not in out
    (tmp_path / "empty").mkdir()
    code, _, _, err = _compare(capsys, tmp_path / "h2", *args, "--history", str(tmp_path / "empty"))
    assert code == 2 and "is not a run history" in err
    broken = tmp_path / "broken"
    shutil.copytree(runs["history"], broken)
    with (broken / "runs.jsonl").open("a") as handle:
        handle.write('{"run_id": "half a line\n')
    line = len((broken / "runs.jsonl").read_text().splitlines())
    code, _, _, err = _compare(capsys, tmp_path / "h3", *args, "--history", str(broken))
    assert code == 2 and f"runs.jsonl line {line}" in err and "unreadable" in err
