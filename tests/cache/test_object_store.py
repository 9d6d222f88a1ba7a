"""The response store on an object store (``gs://`` semantics, offline): shared by runs, visible only when closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from beameval.cache.journal import JournalWriter
from tests.cache import object_store
from tests.pipeline.test_resume_pipeline import DATA, config_for
from transforms.cache import BeamFiles


@pytest.fixture
def bucket(tmp_path: Path) -> str:
    object_store.use_root(str(tmp_path / "fakegs"))
    return f"{object_store.PREFIX}evals-bucket/store"


def objects(tmp_path: Path) -> list[str]:
    root = tmp_path / "fakegs" / "objects"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_store_on_an_object_store_is_filled_by_one_run_and_answers_the_next(
    bucket, clean_server, model_target, write_jsonl, run_eval, tmp_path
):
    rows = DATA[:25]
    config = config_for(write_jsonl(rows), model_target())
    config["cache"] = {"path": bucket}
    first = run_eval(config)
    assert first.code == 0, first.stderr
    assert clean_server.stats()["requests"] == 25
    # The run's journal (local output) was copied into the bucket, not into a local folder named "fakegs:".
    stored = objects(tmp_path)
    assert stored and all(name.startswith("evals-bucket/store/entries/") for name in stored), stored
    assert not list(Path.cwd().glob("fakegs:*")) and not list(tmp_path.glob("**/fakegs:"))

    clean_server.reset()
    second = run_eval(config, output=tmp_path / "second")
    assert second.code == 0, second.stderr
    assert clean_server.stats()["requests"] == 0
    assert second.results["usage"]["cache"] == {"hits": 25, "misses": 0}
    assert second.results["aggregate_scores"] == first.results["aggregate_scores"]
    assert [r["output_text"] for r in second.rows] == [r["output_text"] for r in first.rows]


def test_a_journal_on_an_object_store_shows_every_entry_once_synced(bucket, tmp_path):
    files = BeamFiles()
    journal = f"{bucket}/run/_responses"
    writer = JournalWriter(journal, files, flush_interval=0)
    writer.record("a" * 64, b'{"choices":[{"message":{"content":"x"}}]}', "m")
    writer.flush()  # written and flushed, but an upload is visible only once closed
    assert files.match(files.join(journal, "*.jsonl")) == []
    writer.sync()  # what GenerateSamples.finish_bundle calls: on an object store it closes the shard
    shards = files.match(files.join(journal, "*.jsonl"))
    assert len(shards) == 1
    writer.record("b" * 64, {"choices": [{"message": {"content": "y"}}]}, "m")
    writer.close()
    shards = files.match(files.join(journal, "*.jsonl"))
    assert len(shards) == 2  # a closed shard is never reopened: the next entry went to a new one
    lines = [line for shard in shards for line in files.open(shard).read().splitlines()]
    assert [line[8:9] for line in lines] == [b"a", b"b"]
