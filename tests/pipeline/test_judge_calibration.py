"""A calibrated judge end to end: the test server judges, two Beam worker processes count, oracles check.

The judge's agreement (results.json ``judge_agreement``) must equal scikit-learn's kappa,
the ``krippendorff`` package's alpha and statsmodels' kappa interval, and each judge
score's ``ppi`` must equal ``ppi_py.ppi_mean_ci(..., lam=1)``, all to 1e-9, whichever
worker scored which row.
"""

import json
import random

import krippendorff
import numpy as np
import pytest
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import cohens_kappa

TOL = 1e-9
TWO_PROCESSES = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
VERDICTS = ["bad", "ok", "good"]  # rubric values 0, 1, 2
N_ROWS, N_LABELLED = 80, 50


def judge(model: dict, labels: str, **calibration) -> dict:
    return {
        "type": "llm-judge",
        "model": model,
        "prompt_template": {"messages": [{"role": "user", "content": "JUDGE <{{ item.id }}>"}]},
        "scores": [
            {"name": "quality", "minimum": 1, "maximum": 5},
            {"name": "verdict", "rubric": [{"label": v, "value": i} for i, v in enumerate(VERDICTS)]},
        ],
        "calibration": {"labels": labels, **calibration},
    }


def scripted(seed: int):
    """Human labels for the first rows and a judge that agrees with them mostly; one judge reply is unparsable."""
    rng = random.Random(seed)
    human = [(rng.randint(1, 5), rng.choice(VERDICTS)) for _ in range(N_ROWS)]
    judged = [
        (q if rng.random() < 0.7 else rng.randint(1, 5), v if rng.random() < 0.8 else rng.choice(VERDICTS))
        for q, v in human
    ]
    return human, judged


def run_calibrated(server, model_target, write_jsonl, run_eval, tmp_path, **calibration):
    human, judged = scripted(37)
    rules = [
        {"match": f"JUDGE <r{i}>", "reply": json.dumps({"quality": q, "verdict": v})} for i, (q, v) in enumerate(judged)
    ]
    rules[3] = {"match": "JUDGE <r3>", "reply": "no idea"}  # a labelled row the judge leaves NaN: not counted
    server.configure(rules=[*rules, {"match": "Q", "reply": "an answer"}])
    rows = [{"id": f"r{i}", "question": f"Q{i}"} for i in range(N_ROWS)]
    labels = tmp_path / "labels.jsonl"
    records = [{"id": f"r{i}", "quality": q, "verdict": v} for i, (q, v) in enumerate(human[:N_LABELLED])]
    records.append({"id": "not-in-the-dataset", "quality": 1, "verdict": "bad"})  # never joins: ignored
    labels.write_text("".join(json.dumps(r) + "\n" for r in records))
    config = {
        "dataset": {"path": str(write_jsonl(rows))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "metrics": [judge({"url": server.base_url, "name": "judge", "format": "openai"}, str(labels), **calibration)],
    }
    return run_eval(config, *TWO_PROCESSES), human, judged


def test_agreement_and_ppi_equal_the_oracles_across_two_workers(
    clean_server, model_target, write_jsonl, run_eval, tmp_path
):
    result, human, judged = run_calibrated(clean_server, model_target, write_jsonl, run_eval, tmp_path)
    assert result.code == 0, result.stderr
    records = {record["score"]: record for record in result.results["judge_agreement"]}
    assert list(records) == ["llm-judge.quality", "llm-judge.verdict"]
    labelled = [i for i in range(N_LABELLED) if i != 3]
    unlabelled = range(N_LABELLED, N_ROWS)
    for position, name, categories, level in (
        (0, "quality", [1, 2, 3, 4, 5], "interval"),
        (1, "verdict", VERDICTS, "ordinal"),
    ):
        record = records[f"llm-judge.{name}"]
        h = [human[i][position] for i in labelled]
        j = [judged[i][position] for i in labelled]
        assert record["n"] == 49
        assert record["kappa"] == pytest.approx(
            cohen_kappa_score(h, j, weights="quadratic", labels=categories), abs=TOL
        )
        index = {c: k for k, c in enumerate(categories)}
        as_numbers = np.array([[index[x] for x in h], [index[x] for x in j]], dtype=float)
        alpha = krippendorff.alpha(reliability_data=as_numbers, level_of_measurement=level)
        assert record["alpha"] == pytest.approx(alpha, abs=TOL)
        table = np.zeros((len(categories), len(categories)))
        for a, b in zip(h, j, strict=True):
            table[index[a], index[b]] += 1
        oracle = cohens_kappa(table, wt="quadratic")
        assert (record["kappa_ci_low"], record["kappa_ci_high"]) == pytest.approx(
            (oracle.kappa_low, oracle.kappa_upp), abs=TOL
        )
        assert record["accuracy"] == pytest.approx(sum(a == b for a, b in zip(h, j, strict=True)) / 49, abs=TOL)
        assert record["confusion"][str(categories[0])][str(categories[0])] == table[0, 0]
        assert record["calibrated"] == (record["kappa"] >= 0.6)
        assert (record["statistic"], record["min_agreement"]) == ("kappa", 0.6)
        y = np.array([index[x] for x in h], dtype=float)
        yhat = np.array([index[x] for x in j], dtype=float)
        yhat_unlabelled = np.array([index[judged[i][position]] for i in unlabelled], dtype=float)
        if name == "quality":  # the range score's values are its numbers, not indices
            y, yhat, yhat_unlabelled = y + 1, yhat + 1, yhat_unlabelled + 1
            assert record["bias"] == pytest.approx(float(np.mean(yhat - y)), abs=TOL)
        low, high = ppi_mean_ci(y, yhat, yhat_unlabelled, alpha=0.05, lam=1)
        ppi = next(s for s in result.results["aggregate_scores"]["scores"] if s["name"] == f"llm-judge.{name}")["ppi"]
        assert ppi["mean"] == pytest.approx(float(np.ravel(ppi_mean_pointestimate(y, yhat, yhat_unlabelled, lam=1))[0]))
        assert (ppi["ci_low"], ppi["ci_high"]) == pytest.approx((float(low[0]), float(high[0])), abs=TOL)
        assert (ppi["n_labelled"], ppi["n_unlabelled"]) == (49, 30)


def test_a_bad_label_names_the_file_and_line(clean_server, model_target, write_jsonl, run_eval, tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("id,quality,verdict\nr0,3,good\nr1,7,bad\n")
    config = {
        "dataset": {"path": str(write_jsonl([{"id": "r0", "question": "Q0"}]))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "metrics": [judge({"url": clean_server.base_url, "name": "judge", "format": "openai"}, str(labels))],
    }
    result = run_eval(config)
    assert result.code != 0
    assert f"labels file {labels}, line 3: score 'quality': '7' is not a whole number from 1 to 5" in result.stderr
