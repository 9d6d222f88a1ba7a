"""``--output`` placeholders: ``{run_date}`` / ``{run_id}`` resolved once, and a real run writing there."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from beameval.core.errors import ConfigError
from pipeline.placeholders import resolve_output

# 2026-03-01 00:30 UTC is still 2026-02-28 in New York: the date must be UTC's.
T = dt.datetime(2026, 3, 1, 0, 30, tzinfo=dt.timezone.utc).timestamp()


def test_placeholders_resolve_to_the_utc_date_and_the_run_id(monkeypatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    assert resolve_output("gs://b/evals/{run_date}/{run_id}", "abc123", T) == "gs://b/evals/2026-03-01/abc123"
    assert resolve_output("out/{run_date}-{run_date}", "x", T) == "out/2026-03-01-2026-03-01"
    assert resolve_output("plain/dir", "x", T) == "plain/dir"
    assert resolve_output("odd/{{literal}}/{run_id}", "r1", T) == "odd/{literal}/r1"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("out/{date}", "{date}"),
        ("out/{run_date:%Y}", "{run_date:%Y}"),
        ("out/{run_id!r}", "{run_id!r}"),
        ("out/{}", "{}"),
        ("out/{run_date", "unbalanced"),
        ("out/run_date}", "unbalanced"),
    ],
)
def test_bad_placeholders_are_refused_with_the_valid_ones_named(template: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_output(template, "r", T)
    message = str(caught.value)
    assert expected in message and "{run_date}, {run_id}" in message


def test_a_run_writes_to_the_resolved_directory_and_records_it(
    tmp_path: Path, write_jsonl, run_eval, monkeypatch
) -> None:
    dataset = write_jsonl([{"a": "x", "o": "x"}, {"a": "y", "o": "z"}])
    config = {
        "dataset": {"path": str(dataset)},
        "metrics": [{"type": "exact-match", "reference": "{{ item.a }}", "candidate": "{{ item.o }}"}],
    }
    before = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    template = tmp_path / "runs" / "{run_date}" / "{run_id}"
    history = tmp_path / "history"
    result = run_eval(config, "--history", str(history), output=template)
    after = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    assert result.code == 0, result.stderr
    [written] = list((tmp_path / "runs").glob("*/*/results.json"))
    date, run_id = written.parent.parent.name, written.parent.name
    assert date in (before, after)
    results = json.loads(written.read_text())
    assert results["provenance"]["run_id"] == run_id  # the same id, resolved once
    assert results["counts"] == {"rows": 2, "ok": 2, "errors": 0}
    [record] = [json.loads(line) for line in (history / "runs.jsonl").read_text().splitlines()]
    assert record["output"] == str(written.parent) and record["run_id"] == run_id
    assert not (tmp_path / "runs" / "{run_date}").exists()
    # A second run with the same command line gets a directory of its own: nothing to overwrite.
    assert run_eval(config, output=template).code == 0
    assert len(list((tmp_path / "runs").glob("*/*/results.json"))) == 2
