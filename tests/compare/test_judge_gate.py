"""The gate trusts only calibrated judges: an uncalibrated judge score is INCONCLUSIVE at best."""

import numpy as np

from beameval.compare.gate import ComparisonInput, ScoreInput, gate_comparison
from beameval.compare.messages import verdict_message
from beameval.compare.paired import PairedSums
from beameval.compare.policy import GatePolicy, parse_policy
from beameval.judges.trust import uncalibrated_judges

JUDGE = "llm-judge.quality"
RANGE = (1.0, 5.0)


def _sums(base, cand) -> PairedSums:
    return PairedSums.of_arrays(np.asarray(base, dtype=float), np.asarray(cand, dtype=float))


def _results(judge_agreement=None, **judge) -> dict:
    metric = {"type": "llm-judge", "name": None, "scores": [{"name": "quality"}], **judge}
    config = {"metrics": [{"type": "exact-match", "name": None}, metric]}
    return {"config": config, **({"judge_agreement": judge_agreement} if judge_agreement is not None else {})}


def _agreement(kappa: float, n: int = 60) -> list[dict]:
    return [{"score": JUDGE, "n": n, "kappa": kappa, "statistic": "kappa", "min_agreement": 0.6,
             "calibrated": kappa >= 0.6 and n >= 30}]  # fmt: skip


def _gate(reason, policy=None, delta=0.0):
    base = np.tile([1.0, 2.0, 3.0, 4.0, 5.0], 20)
    score = ScoreInput(JUDGE, _sums(base, base + delta), RANGE, uncalibrated_judge=reason)
    return gate_comparison(ComparisonInput([score]), policy or GatePolicy(), 0.95)


def test_the_reason_names_the_judge_the_side_and_the_agreement():
    good, biased = _results(_agreement(0.81)), _results(_agreement(0.2))
    assert uncalibrated_judges(good, good) == {}
    reason = uncalibrated_judges(good, biased)[JUDGE]
    assert reason == (
        "the judge score llm-judge.quality is not calibrated in the candidate run "
        "(kappa 0.2, min_agreement 0.6, on 60 labelled rows)"
    )
    few = uncalibrated_judges(_results(_agreement(0.9, n=12)), good)[JUDGE]
    assert "in the baseline run (kappa 0.9, min_agreement 0.6, on 12 labelled rows, fewer than the 30 needed)" in few
    none = uncalibrated_judges(_results(), _results())[JUDGE]
    assert none == (
        "the judge score llm-judge.quality has no calibration (human labels) in the baseline run "
        "and has no calibration (human labels) in the candidate run"
    )
    named = _results(name="j2")
    assert list(uncalibrated_judges(named, named)) == ["j2.quality"]


def test_an_uncalibrated_judge_never_gives_go_and_the_message_says_why():
    reason = uncalibrated_judges(_results(_agreement(0.81)), _results(_agreement(0.2)))[JUDGE]
    result = _gate(reason)
    record = result.scores[0]
    assert (record["verdict"], result.verdict) == ("INCONCLUSIVE", "INCONCLUSIVE")
    assert record["uncalibrated_judge"] == reason
    document = {
        "verdict": result.verdict,
        "scores": result.scores,
        "policy": {"confidence_level": 0.95},
        "counts": {"paired": 100, "unpaired_baseline": 0, "unpaired_candidate": 0, "failed_baseline": 0,
                   "failed_candidate": 0},
    }  # fmt: skip
    message = verdict_message(document, "flips.jsonl")
    assert message.startswith("INCONCLUSIVE: 1 of 1 gated scores cannot be decided")
    assert "llm-judge.quality is not calibrated in the candidate run (kappa 0.2" in message
    assert "require_calibrated_judges: false" in message


def test_a_calibrated_judge_and_the_policy_switch_gate_as_before():
    assert _gate(None).verdict == "GO"
    lifted = parse_policy("require_calibrated_judges: false", "policy")
    assert _gate("the judge score llm-judge.quality has no calibration", lifted).verdict == "GO"
    assert lifted.described(None, 0.95)["require_calibrated_judges"] is False


def test_a_regression_stays_no_go_when_the_judge_is_not_calibrated():
    result = _gate("the judge score llm-judge.quality has no calibration", delta=-1.0)
    assert result.verdict == "NO-GO" and result.scores[0]["verdict"] == "NO-GO"
