"""Labels files and the calibration config: clear errors naming file and line, and the per-row counts."""

import pytest
from pydantic import ValidationError

from beameval.core.errors import DatasetError
from beameval.judges.calibration import Calibration, CalibrationConfig, categories_of
from beameval.metrics.judge.scores import RangeScore, RubricScore
from beameval.metrics.llm_judge import LLMJudgeConfig

QUALITY = RangeScore(name="quality", minimum=1, maximum=5)
VERDICT = RubricScore(name="verdict", rubric=[{"label": "good", "value": 1}, {"label": "bad", "value": 0}])


def calibration(tmp_path, text, name="labels.jsonl", **config):
    path = tmp_path / name
    path.write_text(text)
    return Calibration(CalibrationConfig(labels=str(path), **config), [QUALITY, VERDICT])


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        ('{"id": 1, "quality": 3}\n{"id": 2, "quality": 3.5}\n', "l.jsonl",
         "line 2: score 'quality': 3.5 is not a whole number from 1 to 5"),
        ('{"id": 1, "verdict": "great"}\n', "l.jsonl",
         "line 1: score 'verdict': 'great' is not one of the rubric's labels"),
        ('{"id": 1, "quality": true}\n', "l.jsonl", "line 1: score 'quality': True is not a number"),
        ('{"id": 1}\n\n{"id": 1}\n', "l.jsonl", "line 3: the key '1' was already labelled on line 1"),
        ('{"quality": 2}\n', "l.jsonl", "line 1: no value for the key field 'id'"),
        ('{"id": 1, \n', "l.jsonl", "line 1: not valid JSON"),
        ("[1, 2]\n", "l.jsonl", "line 1: expected a JSON object"),
        ("id,quality\nr1,x\n", "l.csv", "line 2: score 'quality': 'x' is not a number"),
        ("", "l.jsonl", "holds no labelled rows"),
    ],
)  # fmt: skip
def test_a_bad_labels_file_names_the_file_and_line(tmp_path, text, name, message):
    with pytest.raises(DatasetError) as error:
        calibration(tmp_path, text, name)
    assert message in error.value.message and str(tmp_path / name) in error.value.message


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(DatasetError, match="cannot read the labels file .*nope.jsonl"):
        Calibration(CalibrationConfig(labels=str(tmp_path / "nope.jsonl")), [QUALITY])


def test_scores_that_cannot_be_calibrated_are_a_config_error():
    with pytest.raises(ValueError, match="whole-number bounds"):
        categories_of(RangeScore(name="p", minimum=0.0, maximum=0.5))
    with pytest.raises(ValueError, match="at most 32 levels"):
        categories_of(RangeScore(name="p", minimum=0, maximum=100))
    judge = {
        "type": "llm-judge",
        "model": {"url": "http://127.0.0.1:1/v1", "name": "j"},
        "scores": [{"name": "p", "minimum": 0, "maximum": 0.5}],
        "calibration": {"labels": "x.jsonl"},
    }
    with pytest.raises(ValidationError, match="calibration needs whole-number bounds"):
        LLMJudgeConfig.model_validate(judge)
    with pytest.raises(ValidationError, match="min_agreement"):
        LLMJudgeConfig.model_validate({**judge, "calibration": {"labels": "x", "min_agreement": 2}})


def test_rows_count_where_they_belong(tmp_path):
    found = calibration(tmp_path, "id,quality,verdict\nr1,2,good\nr2,,bad\n", "l.csv")
    size = found.size
    assert size == 5 * 5 + 5 + 2 * 2 + 2
    labelled = found.row_counts({"id": "r1"}, {"quality": (4.0, ""), "verdict": (1.0, "good")})
    # quality: human level 1 (value 2), judge level 3 (value 4); verdict levels by value: bad, good
    assert labelled[1 * 5 + 3] == 1 and labelled[30 + 1 * 2 + 1] == 1 and sum(labelled) == 2
    half = found.row_counts({"id": "r2"}, {"quality": (3.0, ""), "verdict": (0.0, "bad")})
    assert half[25 + 2] == 1 and half[30 + 0 * 2 + 0] == 1 and sum(half) == 2  # quality unlabelled on r2
    nothing = found.row_counts({"id": "r9"}, {"quality": (float("nan"), ""), "verdict": (1.0, "")})
    assert sum(nothing) == 0  # NaN judge value; a rubric value without its label
    fractional = found.row_counts({"id": "r1"}, {"quality": (3.5, ""), "verdict": (0.0, "bad")})
    assert sum(fractional[:30]) == 0
    records, ppis = found.results("j", [a + b for a, b in zip(labelled, half, strict=True)], 0.95)
    assert [r["score"] for r in records] == ["j.quality", "j.verdict"]
    assert records[0]["confusion"]["2"]["4"] == 1 and records[0]["n"] == 1 and not records[0]["calibrated"]
    assert list(records[1]["confusion"]) == ["bad", "good"]
    # the judge's 3 on the unlabelled row, corrected by its error on the labelled one (2 - 4)
    assert ppis["j.quality"] == {"mean": 1.0, "ci_low": 1.0, "ci_high": 1.0, "n_labelled": 1, "n_unlabelled": 1}
