"""The dataset fingerprint (order- and shard-free), the hashes and models_seen."""

import random

from beameval.compare.identity import (
    DatasetFingerprint,
    RecordsDigest,
    canonical_hash,
    eval_definition,
    models_seen,
    reply_models,
)


def _fingerprint(rows) -> DatasetFingerprint:
    """Each (first row, content) pair as a split of one row."""
    fp = DatasetFingerprint()
    for index, content in rows:
        digest = RecordsDigest(index)
        digest.update(content.encode())
        fp.add(digest.value(), 1)
    return fp


def test_records_digest_is_the_hash_of_the_bytes_however_they_are_fed() -> None:
    whole, pieces = RecordsDigest(5), RecordsDigest(5)
    whole.update(b'{"q": 1}\n{"q": 2}\n')
    for piece in (b'{"q": 1}\n', b'{"q": 2}', b"\n"):
        pieces.update(piece)
    assert whole.value() == pieces.value()
    elsewhere = RecordsDigest(6)
    elsewhere.update(b'{"q": 1}\n{"q": 2}\n')
    assert elsewhere.value() != whole.value() and 0 <= whole.value() < 2**64


def test_fingerprint_does_not_depend_on_order_or_sharding() -> None:
    rows = [(i, f'{{"q": {i}}}') for i in range(300)]
    whole = _fingerprint(rows)
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    parts = [_fingerprint(shuffled[i::4]) for i in range(4)]
    assert DatasetFingerprint.merge(parts).hexdigest() == whole.hexdigest()
    assert DatasetFingerprint.merge(parts).rows == 300


def test_fingerprint_changes_with_content_position_and_duplicates() -> None:
    rows = [(i, f"row {i}") for i in range(10)]
    base = _fingerprint(rows).hexdigest()
    assert _fingerprint([*rows[:9], (9, "row 9!")]).hexdigest() != base
    assert _fingerprint([(i + 1, c) for i, c in rows]).hexdigest() != base
    twice = [*rows, (3, "row 3"), (3, "row 3")]  # a sum does not cancel repeated rows (an XOR would)
    assert _fingerprint(twice).hexdigest() != base


def test_eval_hash_ignores_the_target_and_run_settings_but_not_the_evaluation() -> None:
    config = {
        "dataset": {"path": "a.jsonl"},
        "target": {"model": {"name": "m1", "url": "http://a"}},
        "prompt_template": "{{ item.q }}",
        "params": {"parallelism": 4, "inference": {"temperature": 0}},
        "metrics": [{"type": "exact-match"}],
    }
    same = {**config, "target": {"model": {"name": "m2", "url": "http://b"}}, "dataset": {"path": "b.jsonl"}}
    same["params"] = {"parallelism": 64, "inference": {"temperature": 0}}
    assert canonical_hash(eval_definition(config, "fp")) == canonical_hash(eval_definition(same, "fp"))
    for changed in (
        {**config, "prompt_template": "Q: {{ item.q }}"},
        {**config, "params": {"inference": {"temperature": 0.7}}},
        {**config, "metrics": [{"type": "f1"}]},
        {**config, "params": {**config["params"], "repeats": 3}},
    ):
        assert canonical_hash(eval_definition(changed, "fp")) != canonical_hash(eval_definition(config, "fp"))
    assert canonical_hash(eval_definition(config, "other")) != canonical_hash(eval_definition(config, "fp"))


def test_canonical_hash_ignores_key_order() -> None:
    assert canonical_hash({"a": 1, "b": [1, 2]}) == canonical_hash({"b": [1, 2], "a": 1})


def test_models_seen_from_replies() -> None:
    replies = [{"response": {"model": "m-0613", "system_fingerprint": "fp1"}}] * 3
    replies += [{"response": {"model": "m-0125", "system_fingerprint": None}}, {}, {"response": "text"}]
    replies += [{"response": {"output": "an agent's answer"}}]
    pairs = [found for found in map(reply_models, replies) if found is not None]
    assert pairs == [("m-0613", "fp1")] * 3 + [("m-0125", None)]
    counted = models_seen([(("m-0125", None), 1), (("m-0613", "fp1"), 2), (("m-0613", "fp1"), 1)])
    assert counted == [
        {"model": "m-0613", "system_fingerprint": "fp1", "count": 3},
        {"model": "m-0125", "system_fingerprint": None, "count": 1},
    ]
