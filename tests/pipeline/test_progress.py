"""The run's progress as the user sees it: one bar on a terminal, one driver-side total in multi-process mode."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from transforms.progress import ProgressCounts, read_counts

ROOT = Path(__file__).resolve().parents[2]
N = 20_000


def write_run_files(tmp_path: Path, n: int = N) -> Path:
    # Every 10th row has a null answer: a scoring failure the bar counts as an error.
    rows = [{"answer": None if i % 10 == 9 else "a", "output": "a"} for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data.parquet", row_group_size=5_000)
    config = {
        "dataset": {"path": str(tmp_path / "data.parquet")},
        "params": {"ignore_request_failure": True},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}],
    }
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_under_pty(argv: list[str], timeout: float = 240) -> tuple[int, bytes, str]:
    """Run a command with stderr on a pseudo-terminal (120 columns); return code, terminal bytes, stdout."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    terminal = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            terminal += chunk
        elif process.poll() is not None:
            break
    os.close(master)
    stdout = process.communicate(timeout=30)[0].decode()
    return process.returncode, terminal, stdout


@pytest.mark.slow
def test_one_bar_redrawn_in_place_reaching_100_percent(tmp_path: Path) -> None:
    config = write_run_files(tmp_path)
    code, terminal, stdout = run_under_pty(
        [sys.executable, "-m", "pipeline.run", "--config", str(config), "--output", str(tmp_path / "out")]
    )
    text = terminal.decode("utf-8", errors="replace")
    assert code == 0, text
    # One line, redrawn: every redraw starts with a carriage return, and only the final one ends the line.
    lines = [line for line in text.split("\n") if line.strip()]
    assert len(lines) == 1, lines
    frames = [frame for frame in lines[0].split("\r") if frame.strip()]
    assert len(frames) >= 2 and text.count("\r") >= 2
    final = frames[-1]
    assert re.search(rf"100%\|.*\| {N}/{N} rows", final), final
    assert f"{N // 10:,} errors" in final, final
    assert "rows/s" in final and "<00:00" in final  # the rate, and the ETA at the end
    # Frames only move forward, and the totals are the whole run's, not one worker's share.
    done = [int(m.group(1)) for f in frames if (m := re.search(rf" (\d+)/{N} rows", f))]
    assert done == sorted(done) and done[-1] == N
    assert "progress:" not in text  # no plain lines on a terminal
    assert stdout.startswith(f"rows: {N}")


class FakeTerminal(io.StringIO):
    """stderr that says it is a terminal, for in-process runs."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("interval", "bar"), [("0", False), ("0.05", True)])
def test_progress_interval_zero_draws_no_bar(tmp_path: Path, monkeypatch, interval: str, bar: bool) -> None:
    from pipeline.run import main

    config = write_run_files(tmp_path, 3000)
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = main(["--config", str(config), "--output", str(tmp_path / "out"), f"--progress_interval={interval}"])
    assert code == 0, terminal.getvalue()
    drawn = terminal.getvalue()
    assert ("\r" in drawn and "3000/3000 rows" in drawn) is bar, drawn
    if not bar:
        assert drawn == ""


@pytest.mark.slow
def test_multi_process_lines_show_the_whole_run(tmp_path: Path) -> None:
    """Two worker processes; the driver prints the total of both, without a line per worker."""
    config = write_run_files(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.run", "--config", str(config), "--output", str(tmp_path / "out"),
         "--direct_running_mode=multi_processing", "--direct_num_workers=2", "--progress_interval=0.2"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("progress:")]
    assert lines, result.stderr
    assert not any("worker pid" in line for line in lines)
    with_total = [line for line in lines if f"of {N:,})" in line]
    assert with_total, lines  # the whole run's total, not N / 2
    done = [int(re.match(r"progress: ([\d,]+)", line).group(1).replace(",", "")) for line in lines]
    assert done == sorted(done) and done[-1] <= N


def test_read_counts_sums_worker_files_and_skips_partial_ones(tmp_path: Path) -> None:
    records = [
        {"rows": 10, "errors": 1, "cached": 2, "total": 100, "started": 50.0},
        {"rows": 5, "errors": 0, "cached": 0, "total": 100, "started": 40.0},
        {"rows": 7, "errors": 3, "cached": 1, "total": None, "started": None},
    ]
    for i, record in enumerate(records):
        (tmp_path / f"{i}-w").write_text(json.dumps(record))
    (tmp_path / "3-w.tmp").write_text('{"rows": 1000')  # a file being rewritten
    (tmp_path / "4-w").write_text("{not json")
    assert read_counts(str(tmp_path)) == ProgressCounts(rows=22, errors=4, cached=3, total=100, started=40.0)
    assert read_counts(str(tmp_path / "missing")) == ProgressCounts()
