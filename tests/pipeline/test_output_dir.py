"""--overwrite replaces exactly the earlier run's outputs; rows/ only ever holds one run."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

QA = [{"output": f"a{i}", "answer": f"a{i}"} for i in range(200)]
OFFLINE_METRICS = [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}]


def offline(path) -> dict:
    return {"dataset": {"path": str(path)}, "metrics": OFFLINE_METRICS}


def test_a_one_process_overwrite_after_a_two_process_run_leaves_one_runs_rows(write_jsonl, run_eval, tmp_path):
    shards = [write_jsonl(QA[:100], "part-0.jsonl"), write_jsonl(QA[100:], "part-1.jsonl")]
    config = {"dataset": {"path": str(tmp_path / "part-*.jsonl")}, "metrics": OFFLINE_METRICS}
    assert shards
    out = tmp_path / "out"
    first = run_eval(config, "--direct_running_mode=multi_processing", "--direct_num_workers=2", output=out)
    assert first.code == 0, first.stderr
    second = run_eval(config, "--overwrite", output=out)
    assert second.code == 0, second.stderr
    assert pq.read_table(out / "rows").num_rows == 200  # every row once: no shard of the first run is left
    assert len(second.rows) == 200 and sorted(r["row_index"] for r in second.rows) == list(range(200))


def test_overwrite_leaves_the_users_own_files_alone(write_jsonl, run_eval, tmp_path):
    out = tmp_path / "out"
    config = offline(write_jsonl(QA[:10]))
    assert run_eval(config, output=out).code == 0
    (out / "rows_backup").mkdir()
    (out / "rows_backup" / "keep.txt").write_text("mine")
    (out / "errors.txt").write_text("mine too")
    (out / "notes.md").write_text("and this")
    again = run_eval(config, "--overwrite", output=out)
    assert again.code == 0, again.stderr
    assert (out / "rows_backup" / "keep.txt").read_text() == "mine"
    assert (out / "errors.txt").read_text() == "mine too" and (out / "notes.md").exists()
    manifest = json.loads((out / "_manifest.json").read_text())
    assert {"rows", "errors", "_summary.json", "results.json"} <= set(manifest["entries"])
    assert not {"rows_backup", "errors.txt", "notes.md"} & set(manifest["entries"])
    assert not [p.name for p in out.iterdir() if p.name.startswith("_staging-")]


def test_without_overwrite_an_used_directory_is_refused_and_untouched(write_jsonl, run_eval, tmp_path):
    out = tmp_path / "out"
    config = offline(write_jsonl(QA[:10]))
    assert run_eval(config, output=out).code == 0
    before = (out / "results.json").read_text()
    refused = run_eval(config, output=out)
    assert refused.code == 2 and "already holds outputs" in refused.stderr and "--overwrite" in refused.stderr
    assert (out / "results.json").read_text() == before


def test_a_failed_run_keeps_the_earlier_outputs(write_jsonl, run_eval, tmp_path):
    out = tmp_path / "out"
    good = write_jsonl(QA[:10], "good.jsonl")
    assert run_eval(offline(good), output=out).code == 0
    before = pq.read_table(out / "rows").num_rows
    bad = offline(tmp_path / "missing-*.jsonl")
    failed = run_eval(bad, "--overwrite", output=out)
    assert failed.code == 2
    assert pq.read_table(out / "rows").num_rows == before and (out / "results.json").exists()


def test_an_out_dir_that_a_recursive_dataset_glob_reaches_is_refused_before_the_run(write_jsonl, run_eval, tmp_path):
    """Before, the second run read the first's outputs back as data (10 rows, then 492, then 1,381, all exit 0)."""
    (tmp_path / "data").mkdir()
    write_jsonl(QA[:10], "data/part-0.jsonl")
    out = tmp_path / "out"
    recursive = offline(tmp_path / "**" / "*.jsonl")
    refused = run_eval(recursive, output=out)
    assert refused.code == 2, refused.stderr
    assert "reaches into the output directory" in refused.stderr and str(out) in refused.stderr
    assert not out.exists()  # refused before anything was created
    # A glob that stays out of OUT_DIR's outputs is fine, even with OUT_DIR beside the data.
    flat = offline(tmp_path / "data" / "*.jsonl")
    for _ in range(2):
        result = run_eval(flat, "--overwrite", output=out)
        assert result.code == 0, result.stderr
        assert result.results["counts"]["rows"] == 10
    # A previous run's own files named as the dataset are refused too.
    rows_file = next((out / "rows").glob("*.parquet"))
    named = run_eval(offline(rows_file), "--overwrite", output=out)
    assert named.code == 2 and "reaches into the output directory" in named.stderr


def test_stats_journal_counts_a_runs_own_journal(tmp_path, capsys):
    from beameval.cache.journal import JournalWriter
    from pipeline.cache import main as cache_main

    writer = JournalWriter(str(tmp_path / "out" / "_responses"), flush_interval=0)
    for n in range(3):
        writer.record(f"{n:064x}", {"choices": []}, "m")
    writer.record(f"{0:064x}", {"choices": []}, "m")
    writer.close()
    for path in (tmp_path / "out", tmp_path / "out" / "_responses"):
        capsys.readouterr()
        assert cache_main(["stats", "--journal", str(path)]) == 0
        counted = json.loads(capsys.readouterr().out)
        assert (counted["shards"], counted["entries"], counted["distinct_keys"]) == (1, 4, 3)
    assert cache_main(["stats", "--journal", str(tmp_path / "nothing")]) == 2
    assert "holds no response journal" in capsys.readouterr().err


def test_publishing_on_an_object_store_replaces_every_object_of_the_earlier_run(tmp_path):
    """Folders there are name prefixes: the earlier run's two rows shards must not survive next to the new one."""
    from pipeline.output_dir import publish_outputs, staging_dir
    from tests.cache import object_store

    object_store.use_root(str(tmp_path / "fakegs"))
    output = f"{object_store.PREFIX}bucket/out"
    root = tmp_path / "fakegs" / "objects" / "bucket" / "out"
    for name in ("rows/rows-00000-of-00002.parquet", "rows/rows-00001-of-00002.parquet", "results.json"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("old")
    stage = staging_dir(output, "new")
    for name in ("rows/rows-00000-of-00001.parquet", "errors/errors-00000-of-00001.jsonl", "_summary.json"):
        path = root / stage.rsplit("/", 1)[1] / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("new")
    publish_outputs(output, stage, "new")
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert left == [
        "_manifest.json",
        "_summary.json",
        "errors/errors-00000-of-00001.jsonl",
        "rows/rows-00000-of-00001.parquet",
    ]
    assert all((root / name).read_text() == "new" for name in left if name != "_manifest.json")


@pytest.mark.parametrize("name", [".write-probe", "_lock.json"])
def test_a_symlink_planted_as_the_lock_or_the_write_probe_is_refused_and_its_target_untouched(
    write_jsonl, run_eval, tmp_path, name
):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    refused = run_eval(offline(write_jsonl(QA[:10])), output=out)
    assert refused.code == 2, refused.stderr
    assert f"{str(out / name)!r} is a symbolic link" in refused.stderr
    assert victim.read_text() == "keep me"
    assert not (out / "rows").exists()
