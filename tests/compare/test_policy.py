"""The gate policy file: defaults, validation, unknown keys refused."""

import pytest

from beameval.compare.policy import GatePolicy, parse_policy
from beameval.core.errors import ConfigError


def test_policy_parses_and_gates_named_scores_only() -> None:
    policy = parse_policy("alpha: 0.01\ncorrection: none\nscores:\n  f1.f1: {max_drop: 0.02}\n", "p")
    assert (policy.alpha, policy.correction) == (0.01, "none")
    assert policy.gates(["exact-match.exact-match", "f1.f1"]) == {"f1.f1": 0.02}
    assert policy.unknown_scores(["f1.f1"]) == []
    assert policy.unknown_scores(["exact-match.exact-match"]) == ["f1.f1"]


def test_no_policy_gates_every_score_at_zero_with_holm() -> None:
    policy = GatePolicy()
    assert (policy.alpha, policy.correction) == (0.05, "holm")
    assert policy.gates(["a", "b"]) == {"a": 0.0, "b": 0.0}
    assert parse_policy("", "p").gates(["a"]) == {"a": 0.0}
    assert parse_policy("scores: {}", "p").gates(["a"]) == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("alpha: 0.05\nthreshold: 1\n", "unknown key 'threshold'"),
        ("scores: {f1.f1: {max_drop: -0.1}}", "'scores.f1.f1.max_drop': Input should be greater than or equal to 0"),
        ("scores: {f1.f1: {maxdrop: 0.1}}", "unknown key 'scores.f1.f1.maxdrop'"),
        ("alpha: 1.5", "'alpha': Input should be less than 1"),
        ("correction: bonferroni", "'correction'"),
        ("- 1\n- 2\n", "must be a mapping"),
        ("alpha: [", "not valid YAML"),
    ],
)
def test_bad_policies_are_refused_with_the_key_path(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "policy file 'gate.yaml'")
    assert expected in str(caught.value) and "policy file 'gate.yaml'" in str(caught.value)
