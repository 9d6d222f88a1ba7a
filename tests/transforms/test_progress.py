"""Progress lines: the pure formatter, and lines on stderr during a local run."""

import re

from transforms.progress import format_progress

LINE = re.compile(
    r"^progress: (?P<rows>[\d,]+) rows scored(?: \((?P<pct>[\d.]+)% of (?P<total>[\d,]+)\))?, "
    r"(?P<errors>[\d,]+) errors?, (?P<rate>[\d,]+) rows/s(?P<eta>, ETA \d+:\d\d:\d\d)?$"
)


def test_format_progress_with_and_without_total():
    assert format_progress(120_000, 3, 3.0, None) == "progress: 120,000 rows scored, 3 errors, 40,000 rows/s"
    assert format_progress(250, 1, 0.5, 1000, pid=42) == (
        "progress: 250 rows scored (25.0% of 1,000), 1 error, 500 rows/s, ETA 0:00:01 [worker pid 42]"
    )
    assert format_progress(0, 0, 0.0, 10) == "progress: 0 rows scored (0.0% of 10), 0 errors, 0 rows/s"


def config(path):
    return {
        "dataset": {"path": str(path)},
        "params": {"ignore_request_failure": True},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}],
    }


def rows(n):
    # Every 10th row (9, 19, ...) has a null answer: a scoring failure the progress lines count as an error.
    return [{"answer": None if i % 10 == 9 else "a", "output": "a"} for i in range(n)]


def test_progress_lines_on_stderr_during_a_local_run(write_parquet, run_eval):
    result = run_eval(config(write_parquet(rows(5000))), "--progress_interval=0.01")
    assert result.code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("progress:")]
    assert lines, result.stderr
    counts = []
    for line in lines:
        match = LINE.match(line)
        assert match, line
        done, errors = int(match["rows"].replace(",", "")), int(match["errors"].replace(",", ""))
        assert 0 <= done <= 5000
        # The total (and so the ETA) is known from the first scored row on.
        assert (match["total"], bool(match["eta"])) == (("5,000", True) if done else (None, False)), line
        # Rows are scored in order within the single file; the counters are read while they move.
        assert abs(errors - (done + 1) // 10) <= 5, line
        counts.append(done)
    assert counts == sorted(counts)
    assert "progress:" not in result.stdout


def test_progress_interval_zero_prints_nothing(write_parquet, run_eval):
    result = run_eval(config(write_parquet(rows(5000))), "--progress_interval=0")
    assert result.code == 0, result.stderr
    assert "progress:" not in result.stderr
