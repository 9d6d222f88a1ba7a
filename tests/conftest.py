"""Shared fixtures: dataset writers, the CLI run in-process, output readers, the test server."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from beameval.testserver.harness import ServerProcess
from pipeline.run import main


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str
    output: Path

    @property
    def results(self) -> dict[str, Any]:
        return json.loads((self.output / "results.json").read_text())

    @property
    def rows(self) -> list[dict[str, Any]]:
        files = sorted(glob.glob(str(self.output / "rows" / "*.parquet")))
        table = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
        rows = table.to_pylist() if table is not None else []
        return sorted(rows, key=lambda r: r["row_index"])

    @property
    def errors(self) -> list[dict[str, Any]]:
        records = []
        for path in sorted(glob.glob(str(self.output / "errors" / "*.jsonl"))):
            records += [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        return sorted(records, key=lambda r: r["row_index"])

    def score(self, name: str) -> dict[str, Any]:
        return next(s for s in self.results["aggregate_scores"]["scores"] if s["name"] == name)


@pytest.fixture(autouse=True)
def _safepath_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """``beameval``'s ``main`` sets PYTHONSAFEPATH for the processes it starts; a test calling it
    in-process must not hand that to later tests' subprocesses (a script would lose its own folder
    from ``sys.path``). Recording the variable here makes pytest restore it after each test."""
    if "PYTHONSAFEPATH" in os.environ:
        monkeypatch.setenv("PYTHONSAFEPATH", os.environ["PYTHONSAFEPATH"])
    else:
        monkeypatch.delenv("PYTHONSAFEPATH", raising=False)


@pytest.fixture
def write_jsonl(tmp_path: Path):
    def write(rows: list[dict[str, Any]], name: str = "data.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return path

    return write


@pytest.fixture
def write_parquet(tmp_path: Path):
    def write(rows: list[dict[str, Any]], name: str = "data.parquet", row_group_size: int | None = None) -> Path:
        path = tmp_path / name
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
        return path

    return write


@pytest.fixture
def run_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Write a config, run ``python -m pipeline.run`` in-process, return code, streams and outputs."""
    counter = iter(range(1000))

    def run(config: dict[str, Any], *extra: str, output: Path | None = None) -> CliResult:
        number = next(counter)
        config_path = tmp_path / f"config{number}.yaml"
        config_path.write_text(yaml.safe_dump(config))
        out = output or tmp_path / f"out{number}"
        capsys.readouterr()
        code = main(["--config", str(config_path), "--output", str(out), *extra])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err, out)

    return run


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """One test server per module; tests reset its faults and stats before use."""
    with ServerProcess() as process:
        yield process


@pytest.fixture
def clean_server(server: ServerProcess) -> ServerProcess:
    server.reset(config=True)
    return server


@pytest.fixture
def model_target(server: ServerProcess):
    """``target:`` config for the test server; keyword arguments override model fields."""

    def target(**model: Any) -> dict[str, Any]:
        return {"model": {"url": server.base_url, "name": "test-model", "format": "openai", **model}}

    return target


os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
