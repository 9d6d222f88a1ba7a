"""``--config`` and ``--policy`` are read through Beam's file systems, as a Flex Template job needs (gs://...).

There is no network here, so instead of ``gs://`` a test file system is registered with
Beam under the scheme ``evaltest://`` (Beam finds every ``FileSystem`` subclass by its
scheme, exactly as it finds ``GCSFileSystem``); it maps ``evaltest://PATH`` to the local
``PATH``. A reader that used ``open()`` instead of Beam would fail on these URLs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.localfilesystem import LocalFileSystem

from pipeline.compare import main as compare_main
from pipeline.config import load_config

PREFIX = "evaltest://"


class PrefixFileSystem(LocalFileSystem):  # type: ignore[misc]
    """``evaltest:///abs/path`` is ``/abs/path``; records every path it opened."""

    opened: list[str] = []

    @classmethod
    def scheme(cls) -> str:
        return "evaltest"

    def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        PrefixFileSystem.opened.append(path)
        return super().open(path[len(PREFIX) :], mime_type, compression_type)

    def exists(self, path):
        return super().exists(path[len(PREFIX) :])


def test_config_is_read_from_a_beam_file_system_url(tmp_path: Path) -> None:
    config = {"dataset": {"path": "d.jsonl"}, "metrics": [{"type": "exact-match", "reference": "{{ item.a }}"}]}
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "eval.json").write_text(json.dumps(config))
    for name in ("eval.yaml", "eval.json"):
        loaded = load_config(f"{PREFIX}{tmp_path / name}")
        assert loaded.dataset.path == "d.jsonl" and loaded.metrics[0].type == "exact-match"
    assert PrefixFileSystem.opened[-2:] == [f"{PREFIX}{tmp_path / 'eval.yaml'}", f"{PREFIX}{tmp_path / 'eval.json'}"]


def test_unreadable_urls_get_one_paragraph(tmp_path: Path) -> None:
    from beameval.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"cannot read config file 'evaltest://.*missing.yaml': No such file"):
        load_config(f"{PREFIX}{tmp_path / 'missing.yaml'}")
    with pytest.raises(
        ConfigError, match=r"cannot read config file 'nosuchfs://b/eval.yaml': Unable to get filesystem"
    ):
        load_config("nosuchfs://b/eval.yaml")


def test_a_run_and_a_gated_comparison_with_config_and_policy_behind_urls(
    tmp_path: Path, write_jsonl, run_eval, capsys
) -> None:
    rows = [{"a": f"v{i}", "good": f"v{i}", "bad": f"v{i}" if i % 2 else "wrong"} for i in range(30)]
    dataset = write_jsonl(rows)

    def config(column: str) -> Path:
        path = tmp_path / f"{column}.yaml"
        metric = {"type": "exact-match", "reference": "{{ item.a }}", "candidate": "{{ item." + column + " }}"}
        path.write_text(yaml.safe_dump({"dataset": {"path": str(dataset)}, "metrics": [metric]}))
        return path

    from pipeline.run import main as run_main

    outputs = {}
    for column in ("good", "bad"):
        outputs[column] = tmp_path / f"out-{column}"
        capsys.readouterr()
        code = run_main(["--config", f"{PREFIX}{config(column)}", "--output", str(outputs[column])])
        assert code == 0, capsys.readouterr().err
    bad = json.loads((outputs["bad"] / "results.json").read_text())
    em = bad["aggregate_scores"]["scores"][0]
    assert (em["count"], em["sum"]) == (30, 15.0)  # odd rows keep the reference
    policy = tmp_path / "gate.yaml"
    policy.write_text(yaml.safe_dump({"alpha": 0.05, "scores": {"exact-match.exact-match": {"max_drop": 0.02}}}))
    capsys.readouterr()
    code = compare_main(
        [
            "--baseline",
            str(outputs["good"]),
            "--candidate",
            str(outputs["bad"]),
            "--output",
            str(tmp_path / "cmp"),
            "--policy",
            f"{PREFIX}{policy}",
        ]
    )
    comparison = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    # 15 rows went 1 -> 0 and none the other way: delta -0.5, exact McNemar p = 2 * 0.5**15.
    score = comparison["scores"][0]
    assert score["delta"] == pytest.approx(-0.5) and score["p_value"] == pytest.approx(2 * 0.5**15)
    assert (code, comparison["verdict"]) == (1, "NO-GO"), capsys.readouterr()
    assert comparison["policy"]["scores"] == {"exact-match.exact-match": {"max_drop": 0.02}}
    assert f"{PREFIX}{policy}" in PrefixFileSystem.opened
    PrefixFileSystem.opened.clear()
