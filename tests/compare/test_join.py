"""join_bucket: pairs, unpaired and failed rows, repeats folded into per-row means, duplicates, flips; the tally."""

import math
import random

import numpy as np
import pyarrow as pa
import pytest

from beameval.compare.join import join_bucket, side_schema
from beameval.compare.pairing import BASELINE, CANDIDATE, PairTally, bucket_of, field_key, key_text, key_value

NAMES = ["em", "f1"]


def side(rows, int_keys=False, n_scores=2):
    """rows: (key, row_index, values, ok=True, sample=0, output=None, item=None)."""
    records = []
    for key, index, values, *rest in rows:
        ok, sample, output, item = [*rest, *[True, 0, None, None][len(rest) :]]
        record = {"key": key, "sample_index": sample, "ok": ok, "row_index": index, "output_text": output, "item": item}
        record.update({f"s{i}": v for i, v in enumerate(values)})
        records.append(record)
    return pa.Table.from_pylist(records, schema=side_schema(int_keys, n_scores))


def test_pairs_unpaired_failed_and_nan_are_counted() -> None:
    base = side([('"a"', 0, [1.0, 0.5]), ('"b"', 1, [1.0, 0.5]), ('"d"', 2, [1.0, 0.5]), ('"e"', 6, [math.nan, 0.5])])
    cand = side(
        [
            ('"a"', 3, [0.0, 0.75]),
            ('"c"', 4, [1.0, 0.5]),
            ('"d"', 5, [math.nan, math.nan], False),
            ('"e"', 7, [1.0, 0.25]),
        ]
    )
    tally, flips = join_bucket(base, cand, NAMES)
    assert tally.paired == 2 and tally.unpaired == [1, 1] and tally.failed == [0, 1] and tally.keys == [4, 4]
    assert [s.n for s in tally.scores] == [1, 2] and tally.nan_excluded == [1, 0]
    assert tally.scores[1].mean_d == pytest.approx(((0.75 - 0.5) + (0.25 - 0.5)) / 2)
    assert sorted(f["key"] for f in flips) == ["a", "e"]


def test_repeats_pair_per_row_means_of_ok_samples() -> None:
    base = side([(0, 0, [1.0, 1.0], True, 0), (0, 0, [0.0, 0.0], True, 1), (0, 0, [1.0, 1.0], True, 2)], True)
    cand = side(
        [
            (0, 0, [1.0, 1.0], True, 2, "last"),
            (0, 0, [math.nan, math.nan], False, 1),
            (0, 0, [0.0, 0.0], True, 0, "first"),
            *((1, 1, [math.nan] * 2, False, s) for s in range(3)),
        ],
        True,
    )
    base = pa.concat_tables([base, side([(1, 1, [1.0, 1.0])], True)])
    tally, flips = join_bucket(base, cand, NAMES)
    assert tally.paired == 1 and tally.failed == [0, 1]  # key 1: every candidate sample failed
    assert tally.scores[0].mean_d == pytest.approx(0.5 - 2 / 3) and not tally.scores[0].binary
    assert flips[0]["candidate_output"] == "first" and flips[0]["baseline_scores"]["em"] == pytest.approx(2 / 3)


def test_a_key_seen_twice_on_one_side_is_a_duplicate_with_an_example() -> None:
    base = side([('"q7"', 7, [1.0, 1.0]), ('"q7"', 9, [1.0, 1.0]), ('"q2"', 2, [1.0, 1.0])])
    cand = side([('"q7"', 7, [1.0, 1.0]), ('"q2"', 2, [1.0, 1.0]), ('"q2"', 5, [0.0, 0.0])])
    tally, _ = join_bucket(base, cand, NAMES)
    assert tally.duplicates == [1, 1] and tally.paired == 0
    assert tally.duplicate_example[BASELINE] == ['"q7"', 7, 9]
    assert tally.duplicate_example[CANDIDATE] == ['"q2"', 2, 5]


def test_a_side_may_be_empty() -> None:
    tally, flips = join_bucket(side([(1, 1, [1.0, 1.0])], True), side_schema(True, 2).empty_table(), NAMES)
    assert tally.unpaired == [1, 0] and tally.paired == 0 and flips == []


def test_unkeyed_rows() -> None:
    tally = PairTally.empty(0)
    tally.add_unkeyed(0, 12, ok=True)
    tally.add_unkeyed(0, 3, ok=True)
    tally.add_unkeyed(1, 4, ok=False)
    assert tally.missing_key == [2, 0] and tally.missing_example == [3, None] and tally.unkeyed == [0, 1]


def test_buckets_of_shuffled_rows_merge_to_the_one_bucket_result() -> None:
    rng = random.Random(2)
    base_rows, cand_rows = [], []
    for key in range(600):
        if rng.random() < 0.95:
            base_rows.append((key, key, [float(rng.random() < 0.7), rng.random()], rng.random() < 0.97))
        if rng.random() < 0.95:
            cand_rows.append((key, key, [float(rng.random() < 0.6), rng.random()], rng.random() < 0.97))
    whole, whole_flips = join_bucket(side(base_rows, True), side(cand_rows, True), NAMES)
    rng.shuffle(base_rows)
    rng.shuffle(cand_rows)
    parts = []
    for bucket in range(7):
        b = side([r for r in base_rows if bucket_of(r[0], 7) == bucket], True)
        c = side([r for r in cand_rows if bucket_of(r[0], 7) == bucket], True)
        parts.append(join_bucket(b, c, NAMES))
    merged = PairTally.merge([p[0] for p in parts])
    for name in ("paired", "keys", "unpaired", "failed", "nan_excluded"):
        assert getattr(merged, name) == getattr(whole, name)
    for a, b in zip(merged.scores, whole.scores, strict=True):
        assert (a.n, a.improved, a.regressed, a.binary) == (b.n, b.improved, b.regressed, b.binary)
        assert a.mean_d == pytest.approx(b.mean_d) and a.m2_d == pytest.approx(b.m2_d)
    assert sorted(f["key"] for p in parts for f in p[1]) == sorted(f["key"] for f in whole_flips)
    assert PairTally.from_dict(merged.to_dict()) == merged
    # and against numpy directly
    base = {r[0]: r for r in base_rows if r[3]}
    cand = {r[0]: r for r in cand_rows if r[3]}
    common = sorted(set(base) & set(cand))
    d = np.array([cand[k][2][1] - base[k][2][1] for k in common])
    assert whole.scores[1].n == len(common) and whole.scores[1].sd == pytest.approx(d.std(ddof=1))


def test_flip_records_list_both_outputs_and_which_scores_moved() -> None:
    base = side([('"q1"', 1, [1.0, 0.5], True, 0, "Paris", '{"id": "q1"}'), ('"q2"', 2, [1.0, 0.5])])
    cand = side([('"q1"', 1, [0.0, 0.5], True, 0, "Lyon"), ('"q2"', 2, [1.0, 0.5])])
    _, flips = join_bucket(base, cand, NAMES)
    (flip,) = flips
    assert flip["regressed"] == ["em"] and flip["improved"] == [] and flip["key"] == "q1"
    assert (flip["baseline_output"], flip["candidate_output"]) == ("Paris", "Lyon")
    assert flip["baseline_scores"] == {"em": 1.0, "f1": 0.5} and flip["item"] == {"id": "q1"}


def test_field_keys_keep_json_types_apart_and_buckets_are_stable() -> None:
    values = [1, "1", 1.0, True, None, {"b": 1, "a": 2}, [1, 2]]
    keys = [field_key(v) for v in values]
    assert len(set(keys)) == len(values)
    assert [key_value(k) for k in keys] == values and key_text(field_key("q1")) == '"q1"' and key_text(7) == "7"
    assert field_key({"a": 2, "b": 1}) == field_key({"b": 1, "a": 2})
    assert bucket_of(12345, 7) == 12345 % 7
    assert bucket_of('"q0000001"', 50) == bucket_of('"q0000001"', 50) and 0 <= bucket_of('"q0000001"', 50) < 50
