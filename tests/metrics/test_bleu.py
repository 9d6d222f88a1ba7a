"""bleu: sentence BLEU equals sacrebleu's; corpus BLEU from summed stats equals corpus_bleu."""

from __future__ import annotations

import math
import random

import pytest
import sacrebleu
from pydantic import ValidationError

from beameval.core.errors import MetricError, TemplateError

REFERENCES = ["{{ item.refs[0] }}", "{{ item.refs[1] }}", "{{ item.refs[2] }}"]


def _metric(build, references: int = 3):
    return build("bleu", references=REFERENCES[:references], candidate="{{ item.candidate }}")


def _padded(references: list[str]) -> list[str]:
    """Rows with fewer references repeat the first, so three templates always render."""
    return [*references, *[references[0]] * (3 - len(references))]


def test_outputs(build) -> None:
    metric = _metric(build)
    assert metric.output_names() == ["sentence"]
    assert metric.corpus_output_names() == ["corpus"]


def test_sentence_matches_sacrebleu(build, row, corpus) -> None:
    metric = build("bleu", references=["{{ item.refs[0] }}"])
    assert metric.config.candidate is None
    for candidate, references in corpus:
        if not candidate:
            continue  # the default candidate must be non-empty (see test_missing_candidate)
        result = metric.score(row({"refs": references}, output_text=candidate))
        assert result == {"sentence": sacrebleu.sentence_bleu(candidate, references[:1]).score}


def test_sentence_with_several_references(build, row, corpus) -> None:
    metric = _metric(build)
    for candidate, references in corpus:
        padded = _padded(references)
        result = metric.score(row({"candidate": candidate, "refs": padded}))
        assert result == {"sentence": sacrebleu.sentence_bleu(candidate, padded).score}


def test_exact_sentence_values(build, row) -> None:
    metric = _metric(build, references=1)
    perfect = metric.score(row({"candidate": "a b c d", "refs": ["a b c d"]}))
    assert perfect == {"sentence": 100.00000000000004}  # sacrebleu's floating noise
    assert metric.score(row({"candidate": "", "refs": ["a b"]})) == {"sentence": 0.0}
    assert metric.score(row({"candidate": "x y", "refs": ["a b"]})) == {"sentence": 0.0}


def _corpus_score(metric, row, rows) -> float:
    totals = [0.0] * 10
    for candidate, references in rows:
        stats = metric.corpus_stats(row({"candidate": candidate, "refs": _padded(references)}))
        assert len(stats) == 10
        totals = [a + b for a, b in zip(totals, stats, strict=True)]
    return metric.corpus_score(totals)["corpus"]


def test_corpus_matches_sacrebleu_with_first_references(build, row, corpus) -> None:
    metric = _metric(build)
    candidates = [candidate for candidate, _ in corpus]
    first_references = [references[0] for _, references in corpus]
    expected = sacrebleu.corpus_bleu(candidates, [first_references]).score
    assert 0.0 < expected < 100.0
    assert abs(_corpus_score(metric, row, corpus) - expected) <= 1e-9
    # the other references are ignored at corpus level, like the reference SDK
    all_references = sacrebleu.corpus_bleu(
        candidates, [[_padded(refs)[i] for _, refs in corpus] for i in range(3)]
    ).score
    assert all_references != expected


@pytest.mark.parametrize("size", [1, 2, 7, 50])
def test_corpus_on_subsets_matches_sacrebleu(build, row, corpus, size: int) -> None:
    metric = _metric(build)
    rng = random.Random(size)
    rows = rng.sample(corpus, size)
    expected = sacrebleu.corpus_bleu([c for c, _ in rows], [[r[0] for _, r in rows]]).score
    assert abs(_corpus_score(metric, row, rows) - expected) <= 1e-9


def test_partition_sums_give_the_same_corpus_score(build, row, corpus) -> None:
    metric = _metric(build)
    stats = [metric.corpus_stats(row({"candidate": c, "refs": _padded(r)})) for c, r in corpus]
    whole = metric.corpus_score([sum(column) for column in zip(*stats, strict=True)])["corpus"]
    rng = random.Random(7)
    for parts in (2, 3, 8, 31):
        shuffled = stats[:]
        rng.shuffle(shuffled)
        partials = [[sum(column) for column in zip(*shuffled[i::parts], strict=True)] for i in range(parts)]
        totals = [sum(column) for column in zip(*partials, strict=True)]
        assert metric.corpus_score(totals)["corpus"] == whole


def test_corpus_edge_cases(build) -> None:
    metric = _metric(build)
    assert math.isnan(metric.corpus_score([])["corpus"])  # no rows
    assert metric.corpus_score([0.0] * 10) == {"corpus": 0.0}  # only empty texts
    assert sacrebleu.corpus_bleu([""], [[""]]).score == 0.0
    with pytest.raises(MetricError, match="metric 'bleu' got 3 corpus statistics, expected 10"):
        metric.corpus_score([1.0, 2.0, 3.0])


def test_numbers_render_as_text(build, row) -> None:
    metric = build("bleu", references=["{{ item.answer }}"])
    assert metric.score(row({"answer": 1234}, output_text="1234")) == {
        "sentence": sacrebleu.sentence_bleu("1234", ["1234"]).score
    }


def test_missing_candidate(build, row) -> None:
    metric = build("bleu", references=["x"])
    with pytest.raises(MetricError, match="metric 'bleu' has no candidate"):
        metric.score(row({}, output_text=""))
    with pytest.raises(MetricError, match="metric 'bleu' has no candidate"):
        metric.corpus_stats(row({}))


def test_reference_errors_name_the_template(build, row) -> None:
    metric = build("bleu", references=["fine", "{{ item.nope }}"])
    with pytest.raises(TemplateError, match=r"template 'references\[1\]'.*'nope'"):
        metric.score(row({}, output_text="x"))
    # the corpus statistics only need the first reference
    assert len(metric.corpus_stats(row({}, output_text="x"))) == 10


def test_config_needs_references(build) -> None:
    with pytest.raises(ValidationError, match="references"):
        build("bleu", references=[])
    with pytest.raises(ValidationError, match="references"):
        build("bleu", reference="x")
