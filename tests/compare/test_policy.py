"""The gate policy file: defaults, validation, unknown keys refused."""

import pytest

from beameval.compare.policy import GatePolicy, parse_policy
from beameval.core.errors import ConfigError


def test_policy_parses_and_gates_named_scores_only() -> None:
    policy = parse_policy("alpha: 0.01\ncorrection: none\nscores:\n  f1.f1: {max_drop: 0.02}\n", "p")
    assert (policy.alpha, policy.correction) == (0.01, "none")
    assert policy.confidence_level(0.95) == pytest.approx(0.99)
    assert policy.margin("f1.f1", None) == 0.02 and policy.margin("exact-match.exact-match", (0.0, 1.0)) is None
    assert policy.margin("ok_rate", None) == 0.01  # implicit, always gated
    assert policy.unknown_scores(["f1.f1"]) == []
    assert policy.unknown_scores(["exact-match.exact-match"]) == ["f1.f1"]


def test_no_policy_gates_every_score_of_known_range_at_one_percent_with_holm() -> None:
    policy = GatePolicy()
    assert (policy.alpha, policy.correction, policy.min_pairs, policy.min_group_pairs) == (None, "holm", 10, 30)
    assert policy.confidence_level(None) == 0.95 and policy.confidence_level(0.9) == 0.9
    assert policy.margin("a", (0.0, 1.0)) == 0.01 and policy.margin("bleu", (0.0, 100.0)) == 1.0
    assert policy.margin("remote", None) is None
    assert parse_policy("", "p").margin("a", (0.0, 1.0)) == 0.01
    assert parse_policy("scores: {}", "p").margin("a", (0.0, 1.0)) is None
    assert parse_policy("scores: {}\ndefault_max_drop_fraction: 0.05", "p").margin("a", (0.0, 2.0)) == 0.1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("alpha: 0.05\nthreshold: 1\n", "unknown key 'threshold'"),
        ("scores: {f1.f1: {max_drop: -0.1}}", "'scores.f1.f1.max_drop': Input should be greater than or equal to 0"),
        ("scores: {f1.f1: {maxdrop: 0.1}}", "unknown key 'scores.f1.f1.maxdrop'"),
        ("alpha: 1.5", "'alpha': Input should be less than 1"),
        ("correction: bonferroni", "'correction'"),
        ("min_pairs: 1", "'min_pairs': Input should be greater than or equal to 2"),
        ("- 1\n- 2\n", "must be a mapping"),
        ("alpha: [", "not valid YAML"),
    ],
)
def test_bad_policies_are_refused_with_the_key_path(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "policy file 'gate.yaml'")
    assert expected in str(caught.value) and "policy file 'gate.yaml'" in str(caught.value)
