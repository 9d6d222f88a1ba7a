"""Scopes of a row (groups, cluster) and the finished summary: missing fields are null, groups are ordered."""

from __future__ import annotations

import datetime
import decimal
import json
import math

import pytest

from beameval.config.statistics import StatisticsConfig, field_path
from beameval.core.records import item_json
from beameval.stats.breakdown import OVERALL, parse_scope, resolve, row_keys, value_key
from beameval.stats.clusters import ClusterAccumulator
from beameval.stats.summary import ScoreAccumulator
from beameval.stats.uncertainty import finish_summary


def test_resolve_dotted_paths() -> None:
    item = {"a": {"b": [10, {"c": "x"}]}, "n": math.nan, "z": None}
    assert resolve(item, ("a", "b", "1", "c")) == "x"
    assert resolve(item, ("a", "b", "0")) == 10
    assert resolve(item, ("a", "missing")) is None
    assert resolve(item, ("a", "b", "7")) is None
    assert resolve(item, ("n",)) is None and resolve(item, ("z",)) is None
    assert resolve("not a dict", ("a",)) is None


def test_row_keys_name_scopes_and_cluster() -> None:
    item = json.dumps({"cat": "geo", "meta": {"src": 3}, "doc": {"b": 1, "a": 2}})
    scopes, cluster = row_keys(item, [("cat",), ("meta", "src"), ("gone",)], ("doc",))
    assert scopes == (OVERALL, '0:"geo"', "1:3", "2:null")
    assert cluster == '{"a":2,"b":1}'
    assert [parse_scope(scope) for scope in scopes[1:]] == [(0, "geo"), (1, 3), (2, None)]
    # A row that failed to parse (raw text) is grouped and clustered under null.
    assert row_keys("{not json", [("cat",)], ("doc",)) == ((OVERALL, "0:null"), "null")
    assert row_keys(item, [], None) == ((OVERALL,), None)
    assert value_key(1) != value_key("1") != value_key(True)


def summary_of(values: list[float]) -> dict:
    acc = ScoreAccumulator().add_all(values)
    return {"counts": {"rows": len(values)}, "scores": {"m.s": acc.result("m.s")}, "labels": {}, "corpus": {}}


def test_finish_summary_orders_groups_and_applies_clusters() -> None:
    groups = [
        ("0:null", summary_of([1.0])),
        ('0:"b"', summary_of([0.0, 1.0])),
        ("0:2", summary_of([1.0, 1.0])),
        ('0:"a"', summary_of([0.0])),
        ("1:true", summary_of([0.0])),
    ]
    clusters = ClusterAccumulator().add(2, 1.0).add(3, 3.0).add(1, 0.0).totals()
    overall = summary_of([1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    done = finish_summary(overall, groups, ["cat", "flag"], ["m.s"], 0.95, clusters={OVERALL: [clusters]})
    assert [(g["by"], g["value"]) for g in done["groups"]] == [
        ("cat", 2),
        ("cat", "a"),
        ("cat", "b"),
        ("cat", None),
        ("flag", True),
    ]
    score = done["scores"]["m.s"]
    assert score["ci_method"] == "clustered-t"
    # Σ_c (S_c − n_c·m)² with m = 4/6: (1 − 2m)² + (3 − 3m)² + (0 − m)²
    m = 4 / 6
    want = math.sqrt(3 / 2 * ((1 - 2 * m) ** 2 + (3 - 3 * m) ** 2 + m**2)) / 6
    assert score["stderr"] == pytest.approx(want, rel=1e-12)
    # Groups without cluster totals (none reached the cluster stage here) report no interval.
    assert done["groups"][0]["scores"]["m.s"]["ci_method"] is None


def test_statistics_config_validates_paths() -> None:
    assert field_path("meta.source") == ("meta", "source")
    for bad in ("", "a..b", ".a", "a b"):
        with pytest.raises(ValueError, match="is not a field path"):
            field_path(bad)
    assert StatisticsConfig().confidence_level == 0.95
    with pytest.raises(ValueError, match="more than once"):
        StatisticsConfig(group_by=["a", "a"])


def test_row_keys_from_the_item_equal_row_keys_from_its_written_json() -> None:
    """The keys read from a row as read equal the keys of its written JSON, for every type a reader yields."""
    values = [
        "geo", "", "é ✓ 中", 3, -0.0, 1.5e300, 2**70, math.nan, math.inf, -math.inf, True, None,
        [1, "a", None], {"b": 1, "a": [2, {"z": None}]}, [("k", 1), ("j", 2)],  # a Parquet map: key-value tuples
        datetime.datetime(2026, 12, 2, 17, 0, 5), datetime.date(2026, 1, 1), decimal.Decimal("1.10"), b"\x00bytes",
    ]  # fmt: skip
    paths = [("f",), ("f", "0"), ("f", "1"), ("f", "0", "1"), ("f", "a", "1", "z"), ("missing",)]
    for value in values:
        item = {"f": value, "other": 1}
        written = item_json(item, None)
        for path in paths:
            assert row_keys(written, [path], path, item) == row_keys(written, [path], path), (value, path)
