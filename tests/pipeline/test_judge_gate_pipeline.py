"""Two real runs judged by the test server, then the comparison: a biased judge never gives GO on its score.

Both runs get the same judge replies (the judge score does not move), so the gate would say
GO; only the human labels differ. A judge that agrees with them (kappa about 0.8) gates as
before; one that does not (kappa about 0.2) leaves its score INCONCLUSIVE, and the message
names it, until the policy says ``require_calibrated_judges: false``.
"""

import json
import random

import pytest

from pipeline.compare import main as compare_main

N = 60
INCONCLUSIVE_EXIT = 4


def _run(tmp_path, name, server, run_eval, write_jsonl, labels):
    path = tmp_path / f"{name}.labels.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "quality": q}) + "\n" for i, q in enumerate(labels)))
    config = {
        "dataset": {"path": str(write_jsonl([{"id": f"r{i}"} for i in range(N)], name=f"{name}.jsonl"))},
        "metrics": [
            {
                "type": "llm-judge",
                "model": {"url": server.base_url, "name": "judge", "format": "openai"},
                "prompt_template": {"messages": [{"role": "user", "content": "JUDGE <{{ item.id }}>"}]},
                "scores": [{"name": "quality", "minimum": 1, "maximum": 5}],
                "calibration": {"labels": str(path)},
            }
        ],
    }
    result = run_eval(config, output=tmp_path / name)
    assert result.code == 0, result.stderr
    return result.results["judge_agreement"][0]["kappa"], tmp_path / name


@pytest.fixture
def judged(clean_server, run_eval, write_jsonl, tmp_path):
    rng = random.Random(5)
    judge = [rng.randint(1, 5) for _ in range(N)]
    clean_server.configure(
        rules=[{"match": f"JUDGE <r{i}>", "reply": json.dumps({"quality": q})} for i, q in enumerate(judge)]
    )
    agreeing = [q if rng.random() < 0.8 else rng.randint(1, 5) for q in judge]
    unrelated = [q if rng.random() < 0.1 else rng.randint(1, 5) for q in judge]
    runs = {}
    for name, labels in (("good_a", agreeing), ("good_b", agreeing), ("biased", unrelated)):
        runs[name] = _run(tmp_path, name, clean_server, run_eval, write_jsonl, labels)
    return runs


def _compare(capsys, tmp_path, baseline, candidate, *extra):
    capsys.readouterr()
    out = tmp_path / f"cmp-{baseline.name}-{candidate.name}-{len(extra)}"
    code = compare_main(["--baseline", str(baseline), "--candidate", str(candidate), "--output", str(out), *extra])
    return code, json.loads((out / "comparison.json").read_text()), capsys.readouterr()


def test_a_biased_judge_never_gives_go_on_its_score(judged, capsys, tmp_path):
    (good_kappa, good_a), (_, good_b), (biased_kappa, biased) = judged.values()
    assert good_kappa >= 0.7 and 0.05 <= biased_kappa <= 0.3, (good_kappa, biased_kappa)
    code, comparison, _ = _compare(capsys, tmp_path, good_a, good_b)
    assert (code, comparison["verdict"]) == (0, "GO")
    code, comparison, streams = _compare(capsys, tmp_path, good_a, biased)
    assert (code, comparison["verdict"]) == (INCONCLUSIVE_EXIT, "INCONCLUSIVE")
    record = next(s for s in comparison["scores"] if s["name"] == "llm-judge.quality")
    assert record["verdict"] == "INCONCLUSIVE"
    assert (
        f"llm-judge.quality is not calibrated in the candidate run (kappa {biased_kappa:.3g}"
        in streams.out + streams.err
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text("require_calibrated_judges: false\n")
    code, comparison, _ = _compare(capsys, tmp_path, good_a, biased, "--policy", str(policy))
    assert (code, comparison["verdict"]) == (0, "GO")
