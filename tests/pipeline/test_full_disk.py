"""A full disk under OUT_DIR, and a store that cannot be written: on a real, small tmpfs.

Each test mounts its own 2 MiB tmpfs (the tests run as root, as CI does) and unmounts it
afterwards; a machine where mounting is refused fails these tests rather than skipping
them, since the full-disk path would then go untested.
"""

from __future__ import annotations

import os
import random
import string
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.pipeline.test_resume_pipeline import DATA, config_for

METRICS = [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}]


def mount_tmpfs(path: Path, size: str = "2m") -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    assert done.returncode == 0, f"cannot mount a tmpfs (root needed): {done.stderr.decode()}"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    mount_tmpfs(disk)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> None:
    """Fill the disk to the last byte."""
    with open(disk / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass


def random_rows(count: int, width: int) -> list[dict[str, str]]:
    rng = random.Random(7)
    return [{"output": "".join(rng.choices(string.ascii_letters, k=width)), "answer": "x"} for _ in range(count)]


@pytest.mark.slow
def test_a_full_disk_under_out_dir_ends_with_exit_1_one_message_and_the_earlier_outputs_kept(
    small_disk, write_jsonl, run_eval
):
    out = small_disk / "out"
    small = {"dataset": {"path": str(write_jsonl(random_rows(10, 10), "small.jsonl"))}, "metrics": METRICS}
    assert run_eval(small, output=out).code == 0
    before = (out / "results.json").read_bytes()
    big = {"dataset": {"path": str(write_jsonl(random_rows(3000, 1000), "big.jsonl"))}, "metrics": METRICS}
    full = run_eval(big, "--overwrite", output=out)
    assert full.code == 1, full.stderr
    message = full.stderr.strip()
    assert message.startswith("error: the run stopped because the disk is full: No space left on device")
    assert str(out) in message and "--resume" in message
    assert "Traceback" not in full.stderr and len(message.splitlines()) == 1
    assert (out / "results.json").read_bytes() == before  # what was written is kept
    assert pq.read_table(out / "rows").num_rows == 10

    debug = run_eval(big, "--overwrite", "--debug", output=out)
    assert debug.code == 1 and "Traceback" in debug.stderr  # the traceback only with --debug


@pytest.mark.slow
@pytest.mark.parametrize("broken", ["full", "read-only"])
def test_a_store_that_cannot_be_written_is_a_warning_and_the_run_completes(
    broken, small_disk, clean_server, model_target, write_jsonl, run_eval, tmp_path
):
    store = small_disk / "store"
    store.mkdir()
    if broken == "full":
        fill(small_disk)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    config = config_for(write_jsonl(DATA[:30]), model_target())
    config["cache"] = {"path": str(store)}
    result = run_eval(config, output=tmp_path / "out")
    assert result.code == 0, result.stderr
    cause = "No space left on device" if broken == "full" else "Read-only file system"
    assert f"warning: the response store {str(store)!r} cannot be written ({cause}" in result.stderr
    assert result.results["counts"] == {"rows": 30, "ok": 30, "errors": 0}
    assert any("cannot be written" in warning for warning in result.results["warnings"])
    assert len(list((tmp_path / "out" / "_responses").glob("*.jsonl"))) >= 1  # the responses stay in the journal
    assert not os.listdir(store) or not list(store.glob("entries/*.jsonl"))
