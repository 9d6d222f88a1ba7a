"""``beameval judge-labels``: a stratified file to label from a real run, and the filled file calibrates the judge."""

import csv
import json

from beameval.judges.calibration import Calibration, CalibrationConfig
from beameval.metrics.judge.scores import RangeScore, RubricScore
from pipeline.console import main as console_main

N = 200
VERDICTS = ["bad", "ok", "good"]


def _judge(server, labels=None) -> dict:
    metric = {
        "type": "llm-judge",
        "model": {"url": server.base_url, "name": "judge", "format": "openai"},
        "prompt_template": {"messages": [{"role": "user", "content": "JUDGE <{{ item.id }}>"}]},
        "scores": [
            {"name": "verdict", "rubric": [{"label": v, "value": i} for i, v in enumerate(VERDICTS)]},
            {"name": "confidence", "minimum": 1, "maximum": 5},
        ],
    }
    return {**metric, "calibration": {"labels": str(labels)}} if labels else metric


def test_a_skewed_judge_gives_every_level_its_share_and_the_filled_file_calibrates(
    clean_server, run_eval, write_jsonl, tmp_path, capsys
):
    # 90% "good", 5% "ok", 5% "bad": a simple random sample of 30 would hold one or two of each rare level.
    verdicts = ["good" if i % 20 > 1 else VERDICTS[i % 20] for i in range(N)]
    rules = [
        {"match": f"JUDGE <q{i}>", "reply": json.dumps({"verdict": v, "confidence": 3})} for i, v in enumerate(verdicts)
    ]
    clean_server.configure(rules=rules)
    data = write_jsonl([{"id": f"q{i}", "text": f"row {i}"} for i in range(N)])
    first = run_eval({"dataset": {"path": str(data)}, "metrics": [_judge(clean_server)]})
    assert first.code == 0, first.stderr

    out = tmp_path / "to_label.csv"
    capsys.readouterr()
    code = console_main(
        ["judge-labels", str(first.output), "--output", str(out), "--score", "llm-judge.verdict", "--rows", "30"]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.startswith(f"{out}: 30 rows to label (judged rows by value: 0: 10, 1: 10, 2: 180)")
    records = list(csv.DictReader(out.open()))
    assert len(records) == 30 and list(records[0]) == ["id", "verdict", "confidence", "output_text", "item"]
    assert all(r["verdict"] == "" and r["confidence"] == "" for r in records)  # blind: the judge's scores are not shown
    shown = [verdicts[int(r["id"][1:])] for r in records]
    assert {v: shown.count(v) for v in VERDICTS} == {"bad": 10, "ok": 10, "good": 10}
    assert json.loads(records[0]["item"])["text"] == f"row {records[0]['id'][1:]}"

    # A person fills it in (agreeing with the judge but for three rows), and the run is calibrated with it.
    for number, record in enumerate(records):
        judged = verdicts[int(record["id"][1:])]
        record["verdict"] = judged if number % 10 else VERDICTS[(VERDICTS.index(judged) + 1) % 3]
        record["confidence"] = "3"
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    scores = [RubricScore(name="verdict", rubric=[{"label": v, "value": i} for i, v in enumerate(VERDICTS)]),
              RangeScore(name="confidence", minimum=1, maximum=5)]  # fmt: skip
    assert len(Calibration(CalibrationConfig(labels=str(out)), scores)._labels) == 30
    second = run_eval({"dataset": {"path": str(data)}, "metrics": [_judge(clean_server, out)]})
    assert second.code == 0, second.stderr
    verdict = second.results["judge_agreement"][0]
    assert (verdict["score"], verdict["n"], verdict["accuracy"]) == ("llm-judge.verdict", 30, 0.9)


def test_a_run_without_a_judge_is_refused(run_eval, write_jsonl, tmp_path, capsys):
    data = write_jsonl([{"id": "a", "answer": "x"}])
    run = run_eval(
        {"dataset": {"path": str(data)}, "metrics": [{"type": "exact-match", "reference": "x", "candidate": "x"}]}
    )
    assert run.code == 0
    assert console_main(["judge-labels", str(run.output), "--output", str(tmp_path / "l.jsonl")]) == 2
    assert "has no llm-judge score to sample by" in capsys.readouterr().err


def test_a_directory_without_a_run_is_refused(tmp_path, capsys):
    assert console_main(["judge-labels", str(tmp_path), "--output", str(tmp_path / "l.jsonl")]) == 2
    assert f"cannot read results.json in {str(tmp_path)!r}" in capsys.readouterr().err
